"""A disk that fills up mid-run ends the run with one clear line, and the run file keeps every row
written before; once space is freed, the run resumes. The disk is a real, small tmpfs."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from lamarckian_hpc.runtime.learner.checkpoint import load_run_state, save_run_state
from lamarckian_hpc.storage import RunWriter, StorageFullError, open_run

ROOT = Path(__file__).resolve().parents[1]


def _tmpfs(tmp_path: Path, size: str):
    """A tmpfs of its own, so that filling it touches nothing else."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.fixture
def small_disk(tmp_path):
    """96 MB: room for a short run, then filled by the test."""
    yield from _tmpfs(tmp_path, "96m")


@pytest.fixture
def tiny_disk(tmp_path):
    """2 MB: a small checkpoint fits, a large one does not."""
    yield from _tmpfs(tmp_path, "2m")


def _rows(run: Path) -> int:
    with open_run(run) as reader:
        return len(reader.metric("learning_rate"))


@pytest.mark.second_pass  # over 15 s on two cores
def test_filling_disk_stops_the_run_cleanly_and_resume_continues(small_disk):
    run = small_disk / "full.h5"
    command = [sys.executable, "-m", "lamarckian_hpc", "train", str(ROOT / "configs" / "ppo_cartpole.yaml"),
               "runtime.mode=serial", "env.num_envs=4", "algorithm.batch_size=512", "algorithm.num_minibatches=2",
               "stop.target_return=null", "stop.total_env_steps=5000000", f"storage.directory={small_disk}",
               "storage.run_name=full", "storage.metrics_interval_seconds=0.2",
               "storage.checkpoint_interval_seconds=0.5", "storage.min_free_megabytes=48"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (run.exists() and run.with_suffix(".ckpt").exists() and _rows(run) >= 5):
            assert process.poll() is None and time.monotonic() < deadline, "the run did not get going"
            time.sleep(0.2)
        rows_before_full = _rows(run)
        filler = small_disk / "filler"
        filler.write_bytes(b"\0" * (60 * 1024 * 1024))  # leaves about 36 MB: below the 48 MB reserve
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 1, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "MB free" in lines[0] and "--resume" in lines[0], stderr
    assert "Traceback" not in stderr
    with open_run(run) as reader:
        assert not reader.closed_cleanly
        versions = reader.metric("learning_rate").policy_version
    assert len(versions) >= rows_before_full
    np.testing.assert_array_equal(versions, np.arange(1, len(versions) + 1))

    filler.unlink()
    resumed = subprocess.run([sys.executable, "-m", "lamarckian_hpc", "train", "--resume", str(run),
                              f"stop.total_env_steps={int(versions.size * 512 + 2048)}"],
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    with open_run(run) as reader:
        assert reader.closed_cleanly
        after = reader.metric("learning_rate").policy_version
    np.testing.assert_array_equal(after, np.arange(1, len(after) + 1))
    assert len(after) > len(versions) - 5  # at most the updates since the last checkpoint were redone


def test_writer_refuses_to_start_without_its_reserve(tmp_path):
    with pytest.raises(StorageFullError, match="min_free_megabytes"):
        RunWriter(tmp_path / "never.h5", {}, ["loss_value"], min_free_bytes=1 << 60)
    assert not (tmp_path / "never.h5").exists()


def test_a_checkpoint_that_does_not_fit_is_one_error_and_the_previous_stays_whole(tiny_disk):
    """No reserve: the device itself fills up under torch.save (which reports it as a RuntimeError
    when it writes to a path). The temporary file goes, the previous checkpoint stays."""
    path = tiny_disk / "run.ckpt"
    save_run_state(path, "test", {"x": np.arange(10)})
    with pytest.raises(StorageFullError, match="previous one is intact"):
        save_run_state(path, "test", {"x": np.zeros(1_000_000)})
    assert sorted(entry.name for entry in tiny_disk.iterdir()) == ["run.ckpt"]
    np.testing.assert_array_equal(load_run_state(path, "test")["x"], np.arange(10))
    save_run_state(path, "test", {"x": np.arange(20)})  # the space the failed write took is free again
    np.testing.assert_array_equal(load_run_state(path, "test")["x"], np.arange(20))


FILLING_CREATION_SCRIPT = """
import os, sys
from lamarckian_hpc.storage import RunWriter, StorageFullError
disk = sys.argv[1]
for size in [*range(2_040_000, 2_100_000, 3_000), 3_000_000]:
    try:
        RunWriter(os.path.join(disk, "run.h5"), {{"blob": "x" * size}}, ["entropy", "loss_value"],
                  min_free_bytes=0, population_shape=(3, 2)).close()
    except StorageFullError as error:
        print("refused", size, os.listdir(disk), str(error).splitlines()[0], flush=True)
    else:
        print("created", size, flush=True)
        os.unlink(os.path.join(disk, "run.h5"))
"""


def test_a_run_file_that_does_not_fit_is_one_error_and_leaves_no_file(tiny_disk):
    """No reserve: the device fills up while HDF5 lays the file out, at whichever write the size
    of the config makes fail. Each is one StorageFullError with nothing left behind, and never a
    crash (HDF5 crashes closing datasets after a failed write unless the file is let go with
    care), which a child process shows by its exit status."""
    result = subprocess.run([sys.executable, "-c", FILLING_CREATION_SCRIPT.format(), str(tiny_disk)],
                            capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    refused = [line for line in result.stdout.splitlines() if line.startswith("refused")]
    assert refused, result.stdout
    for line in refused:
        assert "[]" in line and "not created: No space left on device" in line, line
    RunWriter(tiny_disk / "run.h5", {}, ["entropy"], min_free_bytes=0).close()
    assert sorted(entry.name for entry in tiny_disk.iterdir()) == ["run.h5"]
