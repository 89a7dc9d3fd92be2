"""A node lost mid-job on the real Slurm test cluster (slurm/testcluster, 4 simulated nodes): its
slurmd, step daemon, bootstrap task, Ray node and actors are killed at once, as a crashed host
loses them (`slurm/testcluster/testcluster_nodes.py`). With `runtime.on_node_loss=fail` the launch ends with one line
naming the node, the run file stays readable, and `train --resume` continues it with no policy
version written twice or skipped. With `continue` the job outlives Slurm marking the node DOWN and
keeps updating with the other nodes' actors. The node is returned to service afterwards, whatever
happened.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from optional_parts import require_slurm
from test_slurm import Launch, _wait_until

from lamarckian_hpc.runtime.learner.checkpoint import load_checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "slurm" / "testcluster"))  # testcluster_nodes

LOST = "node3"
FOUR_NODES = ["--nodes", "4", "--cpus-per-node", "2", "--time", "10", "--object-store-mb", "100"]


def _versions(run_path) -> np.ndarray:
    from lamarckian_hpc.storage import open_run

    with open_run(run_path) as run:
        return np.asarray(run.metric("learning_rate").policy_version)


def test_lost_node_ends_the_job_with_its_name_and_the_run_resumes(tmp_path):
    require_slurm(4)
    from testcluster_nodes import kill_node, remove_job_leftovers, restore_node

    from lamarckian_hpc.storage import open_run

    launch = Launch(tmp_path, ["runtime.num_actors=4", "stop.max_wall_seconds=300"], FOUR_NODES)
    try:
        checkpoint = launch.run_path.with_suffix(".ckpt")
        _wait_until(checkpoint.is_file, 180, "the first checkpoint")
        launch.wait_for(rf"job {launch.job_id}: .*policy version", 60)
        killed = kill_node(LOST, launch.job_id)
        assert killed.job_pids and killed.step_daemon_pids, killed
        assert launch.finish(120) == 1
        ended_after = time.monotonic() - killed.killed_at
    finally:
        subprocess.run(["scancel", launch.job_id], timeout=30)
        restore_node(LOST)
        remove_job_leftovers(launch.job_id)
    errors = [line for line in launch.output if line.startswith("error:")]
    assert len(errors) == 1, "".join(launch.output)
    assert f"node {LOST} was lost at policy version" in errors[0], errors[0]
    assert "runtime.on_node_loss=fail" in errors[0]
    assert ended_after < 90, f"the launch ended {ended_after:.0f} s after the node was lost"

    # The run file is readable and marked incomplete; the checkpoint saved at the loss covers every row.
    with open_run(launch.run_path) as run:
        assert not run.summary().closed_cleanly
    before = _versions(launch.run_path)
    saved = load_checkpoint(checkpoint)
    assert before.size and saved.policy_version == before.max()
    assert np.all(np.diff(before) > 0)

    # `train --resume` continues it here (the job's Ray cluster is gone: a local one this time).
    resumed = subprocess.run([sys.executable, "-m", "lamarckian_hpc", "train", "--resume", str(launch.run_path),
                              "runtime.ray_address=null", "runtime.num_actors=1",
                              f"stop.total_env_steps={saved.env_frames + 4096}", "stop.max_wall_seconds=null"],
                             capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    after = _versions(launch.run_path)
    assert after.max() > saved.policy_version
    assert np.array_equal(after, np.arange(1, after.max() + 1)), "a policy version written twice or skipped"
    with open_run(launch.run_path) as run:
        assert run.summary().closed_cleanly and run.meta["resumes"] == 1


def test_with_continue_training_goes_on_with_the_nodes_left(tmp_path):
    """Slurm marks the node DOWN only after SlurmdTimeout (60 s here); the job, submitted with
    --no-kill, outlives that, and the learner keeps updating with the other three nodes' actors."""
    require_slurm(4)
    from testcluster_nodes import kill_node, node_state, remove_job_leftovers, restore_node

    from lamarckian_hpc.storage import open_run

    launch = Launch(tmp_path, ["runtime.num_actors=4", "runtime.on_node_loss=continue", "stop.max_wall_seconds=150"],
                    FOUR_NODES)
    try:
        _wait_until(launch.run_path.with_suffix(".ckpt").is_file, 180, "the first checkpoint")
        launch.wait_for(rf"job {launch.job_id}: .*policy version", 60)
        kill_node(LOST, launch.job_id)
        _wait_until(lambda: "DOWN" in node_state(LOST), 120, f"Slurm to mark {LOST} DOWN")
        at_down = _versions(launch.run_path).max()
        assert launch.finish(240) == 0, "".join(launch.output)
    finally:
        subprocess.run(["scancel", launch.job_id], timeout=30)
        restore_node(LOST)
        remove_job_leftovers(launch.job_id)
    text = "".join(launch.output)
    assert f"lost {LOST} and went on without them" in text, text
    versions = _versions(launch.run_path)
    assert versions.max() > at_down + 5, f"only {versions.max() - at_down} updates after {LOST} was marked DOWN"
    assert np.array_equal(versions, np.arange(1, versions.max() + 1)), "a policy version written twice or skipped"
    with open_run(launch.run_path) as run:
        assert run.summary().closed_cleanly


@pytest.fixture(autouse=True)
def _all_nodes_back():
    """Every test leaves the cluster with its four nodes up, even when it failed half way."""
    yield
    from lamarckian_hpc.cluster.scheduler import cluster_problem

    if cluster_problem(1) is None:
        from testcluster_nodes import restore_node

        restore_node(LOST)
