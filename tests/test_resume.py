"""Resume: a training process SIGKILLed mid-run continues from its checkpoint with
`lamarckian-hpc train --resume`, and the run file ends with every policy version exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from trajectory_checks import assert_episodes_consistent

from lamarckian_hpc.config import load_config
from lamarckian_hpc.runtime.learner.checkpoint import checkpoint_path, load_checkpoint
from lamarckian_hpc.runtime.runners.trainer import SerialTrainer
from lamarckian_hpc.storage import RunFileReadError, open_run

ROOT = Path(__file__).resolve().parents[1]
SERIAL = ["runtime.mode=serial", "env.num_envs=4", "algorithm.batch_size=512", "algorithm.num_minibatches=2",
          "stop.target_return=null"]


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "lamarckian_hpc", "train", *args]


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


def _rows_past_checkpoint(run: Path, ckpt: Path) -> bool:
    """The growing run file holds a metric row of a policy version newer than the checkpoint."""
    try:
        with open_run(run) as reader:
            newest_row = int(reader.metric("learning_rate").policy_version.max(initial=0))
    except RunFileReadError:  # caught mid-flush; the next look sees it whole
        return False
    return newest_row > load_checkpoint(ckpt).policy_version


def test_killed_run_resumes_without_duplicated_or_missing_rows(tmp_path):
    run = tmp_path / "runs" / "killed.h5"
    command = _cli(str(ROOT / "configs" / "ppo_cartpole.yaml"), *SERIAL, "stop.total_env_steps=200000",
                   "storage.run_name=killed", "storage.checkpoint_interval_seconds=0.5",
                   "storage.metrics_interval_seconds=0.2", "storage.trajectories.every_episodes=4")
    process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        ckpt = checkpoint_path(run)
        _wait_for(lambda: ckpt.exists() and load_checkpoint(ckpt).policy_version >= 5, 120, "a checkpoint at v5")
        # Rows past the checkpoint reach the file: resume must drop them, not duplicate them.
        _wait_for(lambda: _rows_past_checkpoint(run, ckpt), 120, "metric rows past the checkpoint")
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    saved = load_checkpoint(checkpoint_path(run))
    with open_run(run) as reader:
        assert not reader.closed_cleanly
        versions_before = reader.metric("learning_rate").policy_version
        recorded_before = reader.episodes()
    assert versions_before.max() >= saved.policy_version

    resumed = subprocess.run(_cli("--resume", str(run), f"stop.total_env_steps={saved.env_frames + 2048}"),
                             cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr

    with open_run(run) as reader:
        assert reader.closed_cleanly
        assert reader.meta["resumes"] == 1
        assert reader.meta["resumed_through_version"] == saved.policy_version
        series = reader.metric("learning_rate")
        frames = reader.metric("env_frames_per_second").env_frames
        recorded = assert_episodes_consistent(reader)
    final = load_checkpoint(checkpoint_path(run))
    # Every version from 1 to the last exactly once: nothing duplicated, nothing missing.
    np.testing.assert_array_equal(series.policy_version, np.arange(1, final.policy_version + 1))
    assert np.all(np.diff(frames) > 0)
    assert frames[-1] == final.env_frames >= saved.env_frames + 2048
    assert np.all(np.diff(series.wall_time) > 0), "wall time continues from the checkpoint"
    # Recorded episodes up to the checkpoint are kept, later ones dropped, and numbering goes on.
    kept = recorded_before["env_frames"] <= saved.env_frames
    resumed_rows = recorded["env_frames"] > saved.env_frames
    np.testing.assert_array_equal(recorded["episode"][~resumed_rows], recorded_before["episode"][kept])
    assert resumed_rows.any() and recorded["episode"][resumed_rows].min() >= saved.episodes_count


def test_restored_trainer_continues_the_same_optimisation(tmp_path):
    config = load_config(ROOT / "configs" / "ppo_cartpole.yaml", [*SERIAL, "stop.total_env_steps=1024"])
    trainer = SerialTrainer(config)
    try:
        trainer.train()
        checkpoint = trainer.checkpoint()
    finally:
        trainer.close()
    fresh = SerialTrainer(config)
    try:
        fresh.restore(checkpoint)
        assert fresh.learner.version == trainer.learner.version == checkpoint.policy_version > 0
        assert fresh.sampler.env_frames == checkpoint.env_frames
        for name, tensor in trainer.learner.model.state_dict().items():
            torch.testing.assert_close(fresh.learner.model.state_dict()[name], tensor)
        moments = trainer.learner.optimizer.state_dict()["state"]
        restored = fresh.learner.optimizer.state_dict()["state"]
        assert moments.keys() == restored.keys() and moments
        for key in moments:
            torch.testing.assert_close(restored[key]["exp_avg"], moments[key]["exp_avg"])
        assert fresh.learner.rng.random() == trainer.learner.rng.random()
        assert fresh.progress.episodes.count == trainer.progress.episodes.count
    finally:
        fresh.close()


def test_resume_without_checkpoint_is_one_clear_line(tmp_path):
    run = tmp_path / "runs" / "short.h5"
    first = subprocess.run(_cli(str(ROOT / "configs" / "ppo_cartpole.yaml"), *SERIAL, "stop.total_env_steps=512",
                                "storage.run_name=short"), cwd=tmp_path, capture_output=True,
                           text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    checkpoint_path(run).unlink()
    result = subprocess.run(_cli("--resume", str(run)), cwd=tmp_path, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "no checkpoint" in lines[0], result.stderr


@pytest.mark.parametrize("content", [b"", b"not a checkpoint at all", b"\x80\x04\x95garbage"])
def test_damaged_checkpoint_is_refused_without_running_code(tmp_path, content):
    path = tmp_path / "bad.ckpt"
    path.write_bytes(content)
    with pytest.raises(ValueError, match="bad.ckpt"):
        load_checkpoint(path)


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_checkpoint_that_would_run_code_is_refused(tmp_path):
    marker = tmp_path / "executed"
    path = tmp_path / "evil.ckpt"
    torch.save({"format": 1, "payload": _Payload(marker)}, path)
    with pytest.raises(ValueError, match="evil.ckpt"):
        load_checkpoint(path)
    assert not marker.exists()
