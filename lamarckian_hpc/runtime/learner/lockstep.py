"""The runtime's collectives around each update of a policy's learner group.

Every rank runs the same collectives in the same order every update, whatever it holds, because a
rank that skips one (it has no experience, it wants to stop) leaves the others waiting in it until
they time out (an empty shard deadlocking a collective is the classic trap of data-parallel RL).
One update is:

1. `agree`: rank 0's decision to stop or go on, and every rank's steps and env frames; a starved
   rank takes part with zero steps (zero weight in the update).
2. the learner's update (`learner.update(shard, env_frames)`), whose own collectives average the
   gradients weighted by steps;
3. `reduce_numbers`: the runtime's per-update numbers (episodes and their returns and lengths,
   dropped, lost and malformed counts, connected actors), summed so that rank 0's metrics are
   the run's.

The reducer is the learner group's (`rl.data_parallel.GradientReducer`); each collective times out
in it (`runtime.learner_timeout_seconds`) instead of hanging.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from ...rl.data_parallel import GradientReducer

GO, STOP = 0, 1

#: The counters each rank adds up over its shard, in the order `reduce_numbers` sums them.
COUNTERS: tuple[str, ...] = ("dropped_stale_steps", "lost_messages", "malformed_messages", "env_errors",
                             "actors_connected", "hosts_connected", "credits_in_flight", "credits_written_off",
                             "credits_late", "credits_reclaimed")


@dataclass(frozen=True)
class Agreement:
    stop: bool
    steps: tuple[int, ...]  # each rank's steps for this update
    env_frames: int  # env frames every rank received since the last update, together

    @property
    def total_steps(self) -> int:
        return sum(self.steps)


def agree(reducer: GradientReducer, stop: bool, steps: int, env_frames: int) -> Agreement:
    """Collective 1 of an update: whether to stop (rank 0 decides; any rank may ask) and what each
    rank holds."""
    held = reducer.all_gather_counts(steps)
    flags = torch.tensor([float(stop), float(env_frames)], dtype=torch.float64)
    reducer.all_reduce_sum_([flags])
    return Agreement(bool(flags[0].item() > 0), tuple(int(count) for count in held), int(round(flags[1].item())))


@dataclass(frozen=True)
class UpdateNumbers:
    """The run's per-update numbers, summed over ranks."""

    counters: dict[str, float]
    episode_returns: np.ndarray
    episode_lengths: np.ndarray


def reduce_numbers(reducer: GradientReducer, counters: dict[str, float], episode_returns: Sequence[float],
                   episode_lengths: Sequence[int]) -> UpdateNumbers:
    """Collective 3 of an update: every rank's counters summed, and every rank's finished episodes
    (each rank writes its own into its slot of one tensor, which a sum then fills)."""
    counts = reducer.all_gather_counts(len(episode_returns))
    total, offset = sum(counts), sum(counts[:reducer.rank])
    size = len(COUNTERS)
    values = torch.zeros(size + 2 * total, dtype=torch.float64)
    values[:size] = torch.tensor([float(counters.get(name, 0.0)) for name in COUNTERS], dtype=torch.float64)
    mine = len(episode_returns)
    if mine:
        values[size + offset:size + offset + mine] = torch.as_tensor(np.asarray(episode_returns, np.float64))
        values[size + total + offset:size + total + offset + mine] = torch.as_tensor(
            np.asarray(episode_lengths, np.float64))
    reducer.all_reduce_sum_([values])
    array = values.numpy()
    return UpdateNumbers(dict(zip(COUNTERS, array[:size].tolist())), array[size:size + total].copy(),
                         array[size + total:].astype(np.int64))

