"""What each spawned learner rank of tests/test_honest_updates.py runs, in a module of its own so
that the spawned processes import only torch, the learners and the learner group (not pytest or
the test). Each writes what it saw to a JSON or .npz file in the test's folder."""

from __future__ import annotations

import json
import os
import time
import traceback
from pathlib import Path

import numpy as np
from learner_ranks import case_config, case_spaces

from lamarckian_hpc.rl.data_parallel import empty_experience
from lamarckian_hpc.runtime.algorithms import make_learner
from lamarckian_hpc.runtime.learner.group import LearnerGroupSpec, form_group


def run_job(job: str, rank: int, port: int, out: str) -> None:
    """Rank `rank` of job `job` (each job is one group of 2 on its own port)."""
    if job == "starved":
        starved_update_rank(rank, port, out)
    else:
        waiting_rank(rank, port, out, timeout_seconds=1.0, checkpoint_seconds=2.5)


def _spec(rank: int, port: int, timeout_seconds: float) -> LearnerGroupSpec:
    return LearnerGroupSpec(rank, 2, "127.0.0.1", port, "gloo", timeout_seconds)


def _guard(name: str, folder: Path, rank: int):
    """Write a failure's traceback where the test reads it."""
    def wrap(body):
        try:
            body()
        except BaseException:
            (folder / f"error-{name}-{rank}.txt").write_text(traceback.format_exc())
            raise
    return wrap


def starved_update_rank(rank: int, port: int, out: str) -> None:
    """Rank `rank` of 2: for PPO and IMPALA, one update in which no rank holds a step; writes its
    version and whether its weights moved."""
    import torch

    torch.set_num_threads(1)
    folder = Path(out)

    def body() -> None:
        reducer = form_group(_spec(rank, port, 30.0))
        for case in ("ppo_mlp_2", "impala_2"):
            learner = make_learner(case_config(case), *case_spaces(case), reducer=reducer)
            before = {key: value.copy() for key, value in learner.weights().items()}  # weights() are views
            diagnostics = learner.update(empty_experience(*case_spaces(case)), env_frames=1000)
            moved = max(float(np.abs(learner.weights()[key] - before[key]).max()) for key in before)
            (folder / f"starved-{case}-{rank}.json").write_text(json.dumps(
                {"version": learner.version, "moved": moved, "staleness_max": diagnostics["staleness_max"]}))
        reducer.close()

    _guard("starved", folder, rank)(body)


def waiting_rank(rank: int, port: int, out: str, timeout_seconds: float, checkpoint_seconds: float) -> None:
    """Rank `rank` of 2: rank 0 spends `checkpoint_seconds` (over two timeouts) in its checkpoint
    between two agreements, then dies in its next checkpoint; rank 1 waits for it and writes what
    it saw: both agreements, and the line it stopped with."""
    import torch

    from lamarckian_hpc.runtime.learner.lockstep import RankZeroStages, RankZeroWaitError, RankZeroWatch, agree

    torch.set_num_threads(1)
    folder = Path(out)

    def body() -> None:
        # The group's own timeout is long enough for a rendezvous on a busy machine; rank 1's wait for
        # rank 0 has the short one (it was the collective's, which rank 1 entered at once, before).
        reducer = form_group(_spec(rank, port, 30.0))
        if rank == 0:
            stages = RankZeroStages(reducer.store)
            for _ in range(2):
                stages.enter("gather")
                stages.before_agree()
                agree(reducer, False, 10, 20)
                stages.enter("checkpoint")
                time.sleep(checkpoint_seconds)
            os._exit(0)  # dies in its second checkpoint
        watch = RankZeroWatch(reducer.store, rank, timeout_seconds)
        seen = []
        started = time.monotonic()
        line = "no error"
        try:
            for _ in range(3):
                watch.wait()
                seen.append(agree(reducer, False, 5, 5).total_steps)
        except RankZeroWaitError as error:
            line = str(error)
        (folder / "waiting-1.json").write_text(json.dumps({"agreements": seen, "line": line,
                                                           "seconds": time.monotonic() - started}))

    _guard("waiting", folder, rank)(body)
