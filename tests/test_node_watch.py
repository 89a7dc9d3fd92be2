"""`runtime.on_node_loss` without Slurm: a real two-node Ray cluster on this host
(`ray.cluster_utils.Cluster`) loses its second node (its raylet is killed), and the watch either
stops training with one line naming the node, after saving a checkpoint that a resume continues
with no row written twice, or notes the loss and lets training go on. The Slurm end-to-end test is
tests/test_node_loss.py."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from lamarckian_hpc.config import ConfigError, load_config
from lamarckian_hpc.runtime.learner.checkpoint import checkpoint_path, load_checkpoint
from lamarckian_hpc.runtime.placement.node_watch import NodeLostError, NodeWatch, dead_nodes
from lamarckian_hpc.runtime.runners.training_run import run_training
from lamarckian_hpc.storage import open_run

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "ppo_cartpole.yaml"


@pytest.fixture(scope="module")
def lost_node():
    """A two-node Ray cluster whose second node ("node2") is gone: {label: Ray node id}. Its session
    lives in a temp dir of its own, never the shared /tmp/ray (tests/local_ray.py says why)."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    temp_dir = tempfile.mkdtemp(prefix="lhr-", dir="/tmp")  # short: Ray's socket paths sit below it
    patch = pytest.MonkeyPatch()
    patch.setenv("RAY_TMPDIR", temp_dir)  # Cluster writes its address file to $RAY_TMPDIR/ray
    sessions = str(Path(temp_dir) / "ray")

    # The GCS marks a node dead after health_check_failure_threshold missed checks, 5 of 3 s each by
    # default: checked every 0.3 s, twice, the loss shows within a second instead of about 20.
    fast_health_checks = {"health_check_period_ms": 300, "health_check_timeout_ms": 300, "health_check_failure_threshold": 2}
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                            "temp_dir": sessions, "_system_config": fast_health_checks})
    worker = cluster.add_node(num_cpus=1, temp_dir=sessions)
    ray.init(address=cluster.address, include_dashboard=False)
    try:
        nodes = {"node1": cluster.head_node.node_id, "node2": worker.node_id}
        assert dead_nodes(nodes) == []
        cluster.remove_node(worker, allow_graceful=False)  # kills its raylet, as a crashed host would
        deadline = time.monotonic() + 60
        while dead_nodes(nodes) != ["node2"]:
            assert time.monotonic() < deadline, "Ray did not mark the killed node dead within 60 s"
            time.sleep(0.5)
        yield nodes
    finally:
        ray.shutdown()
        cluster.shutdown()
        patch.undo()
        shutil.rmtree(temp_dir, ignore_errors=True)


def _serial(tmp_path: Path, *overrides: str):
    return load_config(CONFIG, ["runtime.mode=serial", "stop.target_return=null", "algorithm.batch_size=256",
                                f"storage.directory={tmp_path}", "storage.run_name=run", *overrides])


def test_the_policy_is_checked():
    with pytest.raises(ConfigError, match=r"runtime.on_node_loss: Input should be 'fail' or 'continue'"):
        load_config(CONFIG, ["runtime.on_node_loss=ignore"])
    with pytest.raises(ConfigError, match=r"runtime: on_node_loss: continue needs sampling=async"):
        load_config(CONFIG, ["runtime.on_node_loss=continue", "runtime.sampling=sync"])
    assert load_config(CONFIG, []).runtime.on_node_loss == "fail"


def test_a_learner_that_waits_for_experience_still_notices(lost_node):
    """While no update comes (a lost actor's share of a synchronous batch), the trainer calls on_wait."""
    with pytest.raises(NodeLostError, match=r"^node node2 was lost at policy version 3 \(4,096 frames\)"):
        NodeWatch(lost_node, "fail", head="node1").on_wait(3, 4096)


def test_fail_stops_with_the_node_name_and_a_checkpoint_a_resume_continues(lost_node, tmp_path):
    config = _serial(tmp_path, "stop.total_env_steps=100000")
    run = tmp_path / "run.h5"
    with pytest.raises(NodeLostError) as raised:
        run_training(config, run, observers=(NodeWatch(lost_node, "fail", head="node1"),))
    message = str(raised.value)
    assert message.startswith("node node2 was lost at policy version 1 ") and "\n" not in message
    saved = load_checkpoint(checkpoint_path(run))
    with open_run(run) as reader:
        assert not reader.summary().closed_cleanly
        assert list(reader.metric("learning_rate").policy_version) == [saved.policy_version] == [1]
    # Resumed where no node is lost, the run goes on from the checkpoint taken at the loss.
    run_training(_serial(tmp_path, f"stop.total_env_steps={saved.env_frames + 1024}"), run, resume=True)
    with open_run(run) as reader:
        versions = np.asarray(reader.metric("learning_rate").policy_version)
        assert reader.summary().closed_cleanly
    assert versions.max() > 1 and np.array_equal(versions, np.arange(1, versions.max() + 1))


def test_continue_notes_the_loss_and_trains_on(lost_node, tmp_path):
    watch = NodeWatch(lost_node, "continue", head="node1")
    result = run_training(_serial(tmp_path, "stop.total_env_steps=2048"), tmp_path / "run.h5", observers=(watch,))
    assert watch.lost == ["node2"] and watch.lost_at_version == {"node2": 1}
    assert result.updates == 8 and result.env_frames >= 2048
