"""A learner rank's side of tests/test_learner_ranks.py's lockstep test, in a module of its own so
that the spawned processes import only torch and the learner group (not pytest, Ray or the test)."""

from __future__ import annotations

from typing import Any

from lamarckian_hpc.runtime.learner.group import LearnerGroupSpec, form_group
from lamarckian_hpc.runtime.learner.lockstep import agree, reduce_numbers


def lockstep_rank(rank: int, port: int, results: Any) -> None:
    """Rank `rank` of 2: one update's runtime collectives, then rank 0's stop; what it saw goes to `results`."""
    reducer = form_group(LearnerGroupSpec(rank, 2, "127.0.0.1", port, "gloo", 30.0))
    # Rank 1 is starved: it holds no steps, still takes part in every collective, and asks nothing.
    held, frames = [(512, 600), (0, 300)][rank]
    agreement = agree(reducer, False, held, frames)
    episodes = [([10.0, 11.0], [10, 11]), ([30.0], [30])][rank]
    numbers = reduce_numbers(reducer, {"dropped_stale_steps": rank, "lost_messages": 1}, *episodes)
    stop = agree(reducer, rank == 0, 0, 0)
    results.put((rank, agreement, numbers.counters, numbers.episode_returns.tolist(),
                 numbers.episode_lengths.tolist(), stop.stop))
