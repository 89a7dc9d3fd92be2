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

An update in which no rank holds a step trains nothing on any rank (every rank sees the same
agreement), so the version stays and rank 0 publishes nothing. An update that fails part way (a
rank lost in one of its gradient all-reduces) leaves rank 0's learner as the last complete update
left it (`update_whole`), so that the checkpoint saved after the failure holds no half-applied update.

Rank 0 alone publishes, writes metrics and checkpoints, outside the collectives, for as long as
that takes. So that its slow work is never taken for a lost rank, the other ranks enter a
collective only once rank 0 has said, in the group's store, that it enters it too
(`RankZeroStages.before_agree`); while they wait they read which stage rank 0 is in
(`RankZeroWatch`), wait as long as rank 0's process answers while it does its own work, and stop
with one line naming rank 0's stage when it is gone or stays in a bounded stage (its gather) past
the timeout. A rank that stops posts that line in the store (`post_stop`), and rank 0 reports it
(`posted_stops`), so that the run names the rank that failed and why, not the one that gave up.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from ...rl.data_parallel import GradientReducer

log = logging.getLogger(__name__)

GO, STOP = 0, 1
#: The store's keys: rank 0's stage, the agreement it enters next, and a rank's reason for stopping.
STAGE_KEY = "lockstep/stage"
AGREE_KEY = "lockstep/agree/{number}"
STOPPED_KEY = "lockstep/stopped/{rank}"
#: Rank 0's one stage that has a bound of its own (`ranks.starve_seconds`); in any other, the ranks
#: wait for it as long as its process answers.
GATHER = "gather"
#: How often a waiting rank looks at rank 0's stage.
POLL_SECONDS = 0.5
#: The kinds of stop a rank posts: its own actors stalled, it gave up waiting for rank 0, it failed.
STALLED, WAITED, FAILED = "stalled", "waited", "failed"

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



def update_whole(learner: Any, experience: Any, env_frames: int) -> dict[str, float]:
    """`learner.update`, all of it or none of it: on a failure part way (some minibatch steps
    applied, the version not yet new) the learner is put back as the last complete update left it,
    so that the checkpoint saved after the failure is of that update. Costs one copy of the
    learner's state (parameters, optimizer moments) per update."""
    before = copy.deepcopy(learner.state_dict())
    try:
        return learner.update(experience, env_frames)
    except BaseException:
        learner.load_state_dict(before)
        raise


class RankZeroStages:
    """Rank 0's side of the waiting: it says which stage it is in, and when it enters an agreement."""

    def __init__(self, store: dist.Store) -> None:
        self.store = store
        self.agreements = 0  # agreements entered so far (every update's, and the stop's)

    def enter(self, stage: str) -> None:
        self.store.set(STAGE_KEY, f"{self.agreements} {stage}")

    def before_agree(self) -> None:
        """Let the other ranks into agreement number `agreements` (they wait for this key)."""
        self.enter("agree")
        self.store.set(AGREE_KEY.format(number=self.agreements), "")
        if self.agreements:  # every rank has passed the one before: it needed them all
            self.store.delete_key(AGREE_KEY.format(number=self.agreements - 1))
        self.agreements += 1


class RankZeroWaitError(RuntimeError):
    """A rank stopped waiting for rank 0; the message is one line naming rank 0's stage."""


class RankZeroWatch:
    """Rank 1..'s side: wait until rank 0 enters the next agreement, for as long as its stage allows."""

    def __init__(self, store: dist.Store, rank: int, timeout_seconds: float) -> None:
        self.store, self.rank, self.timeout_seconds = store, rank, timeout_seconds
        self.agreements = 0
        #: Rank 0's stage as last read: "<agreements> <stage>", "start" before it said any.
        self.stage = "start"

    def describe(self) -> str:
        """Rank 0's last stage in words, e.g. "checkpoint (after 12 agreements)"."""
        count, _, name = self.stage.partition(" ")
        return f"{name} (after {count} agreements)" if name else self.stage

    def _read_stage(self) -> str:
        if not self.store.check([STAGE_KEY]):
            return "start"
        return self.store.get(STAGE_KEY).decode()

    def wait(self) -> None:
        """Return once rank 0 enters the next agreement. Raises `RankZeroWaitError` when rank 0's
        process is gone (its store stops answering), or it stays in its gather (or has not begun)
        past the timeout; in its own work (publish, metrics, checkpoint) it may take any time,
        which is said once per timeout."""
        key = AGREE_KEY.format(number=self.agreements)
        changed_at = told_at = time.monotonic()
        while True:
            try:
                self.store.wait([key], timedelta(seconds=POLL_SECONDS))
                break
            except Exception:  # noqa: BLE001 - a timeout, or rank 0's store gone: the read below tells which
                try:
                    seen = self._read_stage()
                except Exception as error:  # noqa: BLE001
                    raise RankZeroWaitError(
                        f"learner rank {self.rank}: rank 0 is gone (the group's store stopped answering: "
                        f"{_first_line(error)}) while it was in its {self.describe()}") from None
            now = time.monotonic()
            if seen != self.stage:
                self.stage, changed_at, told_at = seen, now, now
            waited = now - changed_at
            name = self.stage.partition(" ")[2] or self.stage
            if name in (GATHER, "start", "agree"):
                if waited > self.timeout_seconds:
                    raise RankZeroWaitError(
                        f"learner rank {self.rank}: rank 0 stayed in its {self.describe()} for {waited:.0f} s "
                        f"(runtime.learner_timeout_seconds={self.timeout_seconds:g})")
            elif now - told_at >= self.timeout_seconds:
                told_at = now
                log.warning("learner rank %d: waiting for rank 0's %s for %.0f s", self.rank, self.describe(), waited)
        self.agreements += 1


def post_stop(store: dist.Store | None, rank: int, kind: str, line: str) -> None:
    """Say in the group's store why rank `rank` stops (`kind`: STALLED, WAITED or FAILED), for rank 0
    to report; nothing when the store is gone."""
    if store is None:
        return
    try:
        store.set(STOPPED_KEY.format(rank=rank), f"{kind} {line}")
    except Exception:  # noqa: BLE001 - rank 0, which holds the store, is gone
        pass


def posted_stops(store: dist.Store, world_size: int) -> Mapping[int, tuple[str, str]]:
    """The ranks that said why they stopped: rank -> (kind, line)."""
    stops = {}
    for rank in range(1, world_size):
        key = STOPPED_KEY.format(rank=rank)
        try:
            if store.check([key]):
                kind, _, line = store.get(key).decode().partition(" ")
                stops[rank] = (kind, line)
        except Exception:  # noqa: BLE001
            break
    return stops


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
