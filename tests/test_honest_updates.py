"""Honest versions in a learner group: an update that trained no step makes no new version and
publishes nothing, an update that fails part way leaves rank 0's learner (hence its checkpoint)
as the last complete update left it, and rank 0's own slow work (publish, metrics, checkpoint) is
never blamed on another rank. Real gloo groups of spawned processes on 127.0.0.1, and one run
with a real local Ray, real actors and two learner ranks."""

from __future__ import annotations

import json
import multiprocessing
import time
from pathlib import Path

import numpy as np
import pytest
from honest_update_ranks import run_job
from learner_ranks import VERSION, case_config, case_spaces, global_batch

from lamarckian_hpc.config import ConfigError, load_config
from lamarckian_hpc.rl.data_parallel import empty_experience
from lamarckian_hpc.runtime.algorithms import make_learner
from lamarckian_hpc.runtime.learner.group import LearnerGroupError, free_port
from lamarckian_hpc.runtime.learner.lockstep import update_whole

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


JOBS = ("starved", "waiting")


@pytest.fixture(scope="module")
def ranks_ran(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every group of two at once, each on its own port; the folder of what the ranks wrote."""
    out = tmp_path_factory.mktemp("honest")
    context = multiprocessing.get_context("spawn")
    processes = []
    for job in JOBS:
        port = free_port("127.0.0.1")
        processes += [context.Process(target=run_job, args=(job, rank, port, str(out))) for rank in range(2)]
    for process in processes:
        process.start()
    deadline = time.monotonic() + 120
    for process in processes:
        process.join(max(deadline - time.monotonic(), 1))
    alive = [process for process in processes if process.is_alive()]
    for process in alive:
        process.kill()
    errors = "\n".join(path.read_text() for path in sorted(out.glob("error-*.txt")))
    assert not alive and not errors, f"{len(alive)} ranks still running after 120 s; errors:\n{errors}"
    return out


@pytest.mark.parametrize("case", ["ppo_mlp_2", "impala_2"])
def test_an_update_of_no_steps_makes_no_new_version(ranks_ran: Path, case: str) -> None:
    """One learner, and two ranks both starved: the version stays 0 and the weights as they were
    (before: one rank raised on the empty staleness, two ranks went to version 1)."""
    alone = make_learner(case_config(case), *case_spaces(case))
    before = {key: value.copy() for key, value in alone.weights().items()}  # weights() are views
    diagnostics = alone.update(empty_experience(*case_spaces(case)), env_frames=1000)
    assert alone.version == 0 and diagnostics["staleness_max"] == -1
    assert all(np.array_equal(alone.weights()[key], before[key]) for key in before)
    for rank in range(2):
        seen = json.loads((ranks_ran / f"starved-{case}-{rank}.json").read_text())
        assert seen == {"version": 0, "moved": 0.0, "staleness_max": -1}, (rank, seen)


class FailsAtReduction:
    """Rank 0 of a group of two whose other rank holds nothing, and whose `fail_at`-th gradient sum
    (a step's gradients and flags, several tensors; the batch's moments and totals are one each)
    fails as one with a lost rank does: the update has applied the minibatch steps before it by then."""

    rank, world_size = 0, 2

    def __init__(self, fail_at: int) -> None:
        self.fail_at, self.reductions = fail_at, 0

    def all_gather_counts(self, count: int) -> list[int]:
        return [count, 0]

    def all_reduce_sum_(self, tensors) -> None:
        if len(tensors) == 1:
            return
        self.reductions += 1
        if self.reductions == self.fail_at:
            raise LearnerGroupError("learner rank 0 of 2: all_reduce_sum #3 failed: rank(s) [1] gone", (1,))


@pytest.mark.parametrize("case", ["ppo_mlp_2", "impala_2"])
def test_an_update_that_fails_part_way_leaves_the_last_complete_one(case: str) -> None:
    """The third minibatch step's gradient sum fails: `update_whole` gives back the learner as it
    was before the update (what the checkpoint then saves), where the plain update keeps the two
    steps it applied."""
    experience = global_batch(case)
    kept = {}
    for name, update in (("whole", update_whole), ("plain", lambda learner, batch, frames: learner.update(batch, frames))):
        learner = make_learner(case_config(case), *case_spaces(case), reducer=FailsAtReduction(3))
        learner.version = VERSION  # the batch's policy version
        before = {key: np.array(value, copy=True) for key, value in learner.weights().items()}
        with pytest.raises(LearnerGroupError, match="rank\\(s\\) \\[1\\] gone"):
            update(learner, experience, 1000)
        kept[name] = max(float(np.abs(learner.weights()[key] - before[key]).max()) for key in before)
        assert learner.version == VERSION
    assert kept["plain"] > 0, "the failure came before any step: the test would show nothing"
    assert kept["whole"] == 0.0, f"a half-applied update was kept: weights moved by {kept['whole']}"


def test_other_ranks_wait_out_rank_0s_checkpoint_and_name_it_when_rank_0_is_gone(ranks_ran: Path) -> None:
    """Rank 0's checkpoint takes 2.5 timeouts: rank 1 waits it out and both agreements happen.
    Rank 0 then dies in its next checkpoint: rank 1 stops with one line naming that stage."""
    seen = json.loads((ranks_ran / "waiting-1.json").read_text())
    assert seen["agreements"] == [15, 15], seen
    assert "\n" not in seen["line"] and "learner rank 1: rank 0 is gone" in seen["line"], seen["line"]
    assert "checkpoint (after 2 agreements)" in seen["line"], seen["line"]


def test_on_node_loss_continue_is_refused_for_several_learners() -> None:
    with pytest.raises(ConfigError, match=r"runtime.on_node_loss: continue cannot be honoured with "
                                          r"runtime.learners: 2 .*runtime.on_node_loss: fail .*runtime.learners: 1"):
        load_config(CONFIGS / "ppo_cartpole.yaml", ["runtime.learners=2", "runtime.on_node_loss=continue"])
    assert load_config(CONFIGS / "ppo_cartpole.yaml", ["runtime.learners=2"]).runtime.on_node_loss == "fail"
    assert load_config(CONFIGS / "ppo_cartpole.yaml", ["runtime.on_node_loss=continue"]).runtime.learners == 1


class SlowCheckpoint:
    """An observer that takes 2.5 learner timeouts at the first update, as a checkpoint to a slow
    file system would; it keeps every report."""

    stage = "checkpoint"

    def __init__(self, seconds: float) -> None:
        self.seconds, self.reports = seconds, []

    def on_update_end(self, report) -> None:
        if not self.reports:
            time.sleep(self.seconds)
        self.reports.append(report)

    def on_train_end(self, result) -> None:
        pass


@pytest.mark.second_pass
def test_a_group_run_waits_out_a_slow_checkpoint_and_never_versions_without_steps() -> None:
    """Two ranks, a 4 s learner timeout (ranks starve after 1 s, before the actors are up): rank 0's
    10 s checkpoint at its first update costs nothing (before: rank 1 gave up in its agreement and
    the run ended with "learner rank 1 ... died"), and every update that made a version trained
    steps (before: the first, starved, updates went to new versions with no step)."""
    pytest.importorskip("ray")
    from local_ray import local_ray

    from lamarckian_hpc.runtime.runners.distributed import DistributedTrainer

    config = load_config(CONFIGS / "ppo_cartpole.yaml",
                         ["runtime.mode=ray", "runtime.num_actors=2", "runtime.learners=2",
                          "runtime.learner_timeout_seconds=4", "stop.target_return=null",
                          "stop.total_env_steps=3072"])
    slow = SlowCheckpoint(10.0)
    with local_ray():
        trainer = DistributedTrainer(config, [slow])
        try:
            trainer.train()
        finally:
            trainer.close()
    reports = slow.reports
    assert len(reports) >= 3
    assert [report.policy_version for report in reports] == list(range(1, len(reports) + 1))
    trained = [report.trained_steps for report in reports]
    assert trained[0] > 0 and all(later > earlier for earlier, later in zip(trained, trained[1:])), trained
