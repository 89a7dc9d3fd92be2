"""Run files and checkpoints under kills, full devices, damage and other users: a file appears under
its name only once it is valid, is private from the moment it exists, is synced before it
replaces the one before, and every failure is one clear error that leaves nothing half-written."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from lamarckian_hpc.runtime.learner.checkpoint import load_run_state, save_run_state
from lamarckian_hpc.storage import RunFileReadError, RunWriter, StorageFullError, open_run

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]

#: A writer that stops for good half-way through creating its file, where a SIGKILL finds it.
STALLED_CREATION_SCRIPT = """
import sys, time
import lamarckian_hpc.storage.run_file as run_file

def stall(*args, **kwargs):
    print("creating", flush=True)
    time.sleep(120)

run_file.write_attributes = stall
run_file.RunWriter({path!r}, {{"seed": 1}}, ["entropy"])
"""


@pytest.fixture
def umask_022():
    """The usual umask, whatever the test runner's is: a file left to it would be world-readable."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


# ---------------------------------------------------------------------------------------------- creation
def test_a_writer_killed_while_creating_its_file_leaves_the_name_free(tmp_path: Path) -> None:
    path = tmp_path / "run.h5"
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPOSITORY_ROOT), os.environ.get("PYTHONPATH", "")]))
    process = subprocess.Popen([sys.executable, "-c", STALLED_CREATION_SCRIPT.format(path=str(path))],
                               stdout=subprocess.PIPE, text=True, env=environment)
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "creating"
        os.kill(process.pid, signal.SIGKILL)
        assert process.wait(timeout=30) == -signal.SIGKILL
    finally:
        if process.poll() is None:
            process.kill()
    assert not path.exists(), "a half-created file sits under the run's name"
    for leftover in tmp_path.iterdir():  # what the kill left is refused as one clear error
        with pytest.raises(RunFileReadError, match=leftover.name):
            open_run(leftover)
    with RunWriter(path, {"seed": 2}, ["entropy"]) as writer:  # the next run of that name starts
        writer.append("entropy", 0.5, env_frames=1, policy_version=1)
    with open_run(path) as reader:
        assert reader.config == {"seed": 2} and len(reader.metric("entropy")) == 1
    assert sorted(entry.name for entry in tmp_path.iterdir()) == ["run.h5"]


def test_a_run_file_gets_its_name_only_once_it_is_in_swmr_mode(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "run.h5"
    seen: list[bool] = []
    real_flush = h5py.File.flush

    def flush(file: h5py.File) -> None:
        seen.append(path.exists())
        real_flush(file)

    monkeypatch.setattr(h5py.File, "flush", flush)
    RunWriter(path, {}, ["entropy"]).close()
    assert seen and not seen[0], "the file had its name before it was complete"
    with h5py.File(path, "r", libver="latest", swmr=True) as file:
        assert file["status/closed"][0] == 1


def test_a_failed_creation_leaves_no_file(tmp_path: Path, monkeypatch) -> None:
    from lamarckian_hpc.storage import run_file

    def broken(*args, **kwargs):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(run_file, "create_population_datasets", broken)
    with pytest.raises(OSError, match="Input/output"):
        RunWriter(tmp_path / "run.h5", {}, ["entropy"], population_shape=(2, 2))
    assert list(tmp_path.iterdir()) == []


def test_an_existing_run_file_is_kept_and_named_in_the_error(tmp_path: Path) -> None:
    path = tmp_path / "run.h5"
    RunWriter(path, {"seed": 1}, ["entropy"]).close()
    with pytest.raises(FileExistsError, match="run.h5"):
        RunWriter(path, {"seed": 2}, ["entropy"])
    with open_run(path) as reader:
        assert reader.config == {"seed": 1}
    assert sorted(entry.name for entry in tmp_path.iterdir()) == ["run.h5"]


# ---------------------------------------------------------------------------------------------- privacy
def test_a_run_file_is_private_from_the_moment_it_exists(tmp_path: Path, monkeypatch, umask_022) -> None:
    """Not created with the umask's mode and chmod-ed later: HDF5 opens a file that already is private."""
    modes: list[int] = []
    real_init = h5py.File.__init__

    def init(file: h5py.File, name, *args, **kwargs) -> None:
        real_init(file, name, *args, **kwargs)
        modes.append(_mode(Path(name)))

    monkeypatch.setattr(h5py.File, "__init__", init)
    path = tmp_path / "run.h5"
    RunWriter(path, {}, ["entropy"]).close()
    assert modes and modes[0] == 0o600, f"created with mode {modes[0]:o}"
    assert _mode(path) == 0o600


def test_new_run_folders_are_private_from_the_moment_they_exist(tmp_path: Path, monkeypatch, umask_022) -> None:
    modes: dict[str, int] = {}
    real_mkdir = os.mkdir

    def mkdir(path, mode=0o777, *args, **kwargs) -> None:
        real_mkdir(path, mode, *args, **kwargs)
        modes[os.fspath(path)] = _mode(Path(path))

    monkeypatch.setattr(os, "mkdir", mkdir)
    RunWriter(tmp_path / "a" / "b" / "run.h5", {}, ["entropy"]).close()
    assert set(modes) == {str(tmp_path / "a"), str(tmp_path / "a" / "b")}
    assert set(modes.values()) == {0o700}, modes


def test_a_checkpoint_is_private_while_it_is_written(tmp_path: Path, monkeypatch, umask_022) -> None:
    modes: list[int] = []
    real_save = torch.save

    def save(payload, target, *args, **kwargs) -> None:
        real_save(payload, target, *args, **kwargs)
        modes.extend(_mode(entry) for entry in tmp_path.iterdir() if entry.name.endswith(".writing"))

    monkeypatch.setattr(torch, "save", save)
    path = tmp_path / "run.ckpt"
    save_run_state(path, "test", {"x": np.arange(3)})
    assert modes == [0o600] and _mode(path) == 0o600


# ---------------------------------------------------------------------------------------------- durability
def test_a_checkpoint_syncs_its_data_and_its_folder(tmp_path: Path, monkeypatch) -> None:
    synced: list[tuple[int, bool]] = []  # (inode, is a folder), in order
    real_fsync = os.fsync

    def fsync(descriptor: int) -> None:
        status = os.fstat(descriptor)
        synced.append((status.st_ino, stat.S_ISDIR(status.st_mode)))
        real_fsync(descriptor)

    monkeypatch.setattr(os, "fsync", fsync)
    path = tmp_path / "run.ckpt"
    save_run_state(path, "test", {"x": np.arange(3)})
    assert (path.stat().st_ino, False) in synced, "the checkpoint's data was not synced"
    assert synced[-1] == (tmp_path.stat().st_ino, True), "the folder was not synced after the rename"
    assert synced.index((path.stat().st_ino, False)) < len(synced) - 1


def test_a_failed_torch_save_is_one_storage_error_and_leaves_no_temporary(tmp_path: Path, monkeypatch) -> None:
    """torch reports a write that fails half-way (a full device) as a RuntimeError."""
    path = tmp_path / "run.ckpt"
    save_run_state(path, "test", {"x": np.arange(3)})
    real_save = torch.save

    def failing(payload, target, *args, **kwargs) -> None:
        real_save(payload, target, *args, **kwargs)
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")

    monkeypatch.setattr(torch, "save", failing)
    with pytest.raises(StorageFullError, match="previous one is intact"):
        save_run_state(path, "test", {"x": np.arange(5)})
    assert sorted(entry.name for entry in tmp_path.iterdir()) == ["run.ckpt"]
    np.testing.assert_array_equal(load_run_state(path, "test")["x"], np.arange(3))


def test_an_interrupted_checkpoint_leaves_no_temporary(tmp_path: Path, monkeypatch) -> None:
    """Interrupted half-way through writing (Ctrl-C, or the signal Slurm sends at the time limit)."""

    def interrupted(payload, target, *args, **kwargs) -> None:
        if isinstance(target, (str, os.PathLike)):
            Path(target).write_bytes(b"PK\x03\x04 half a checkpoint")
        else:
            target.write(b"PK\x03\x04 half a checkpoint")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save_run_state(tmp_path / "run.ckpt", "test", {})
    assert list(tmp_path.iterdir()) == []
