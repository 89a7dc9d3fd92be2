"""Training state that survives the process: a run killed, crashed or requeued at its time limit
continues from its last checkpoint with the same policy version, optimizer, frames and RNG.

A checkpoint sits next to its run file (`<run>.ckpt`). It is written with `torch.save` to a
temporary name (`<run>.ckpt.writing`, private to its owner from the moment it exists), synced to
disk, renamed, and its folder synced, so a kill or a crash of the machine mid-write leaves the
previous checkpoint whole and a finished one is never lost to the page cache. A write that fails
(a full device: `OSError`, or the `RuntimeError` torch raises for it) removes the temporary file
and is one StorageFullError. It is read with `weights_only=True`, so that loading a checkpoint
cannot execute code. Before each checkpoint
the run file is flushed: every metric row up to the checkpoint's policy version is on disk, and a
resumed run keeps exactly those rows (`storage.continue_run_file`).

Evolution runs (PBT+PPO, EMOGI, game testing) keep their state in the same kind of file, through
`save_run_state` and `load_run_state`: a tree of dicts, lists, numbers and numpy arrays (stored as
tensors, since `weights_only` loading refuses numpy objects), tagged with the algorithm's name.

torch is imported by the functions that need it, not with the module: a training run imports
this module before it starts Ray, and it imports torch meanwhile (`ray_setup.start_ray_while_importing`).
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ..storage import (RunWriter, StorageFullError, create_private_file, ensure_free_space, failure_reason,
                       fsync_folder)
from .episodes import RecentEpisodes
from .observers import TrainResult, UpdateReport

CHECKPOINT_FORMAT = 1


def checkpoint_path(run_path: str | Path) -> Path:
    return Path(run_path).with_suffix(".ckpt")


@dataclass
class TrainingProgress:
    """The counters a training loop carries from one update to the next, and across a resume."""

    episodes: RecentEpisodes
    env_frames: int = 0
    updates: int = 0
    trained_steps: int = 0
    wall_time_before: float = 0.0  # training seconds spent by earlier processes of this run
    reached_at: int | None = None
    started: float = field(default_factory=time.monotonic)

    @property
    def wall_time(self) -> float:
        return self.wall_time_before + time.monotonic() - self.started


@dataclass(frozen=True)
class TrainingCheckpoint:
    policy_version: int
    env_frames: int
    updates: int
    trained_steps: int
    wall_time: float
    episodes_count: int
    recent_returns: list[float]
    recent_lengths: list[int]
    reached_at: int | None
    learner: dict[str, Any]

    @classmethod
    def of(cls, progress: TrainingProgress, learner_state: dict[str, Any]) -> TrainingCheckpoint:
        episodes = progress.episodes
        return cls(int(learner_state["version"]), progress.env_frames, progress.updates, progress.trained_steps,
                   progress.wall_time, episodes.count, list(episodes.returns), list(episodes.lengths),
                   progress.reached_at, learner_state)

    def progress(self, window: int) -> TrainingProgress:
        """The loop counters as they were, with the clock restarted now."""
        episodes = RecentEpisodes(window)
        episodes.add(self.recent_returns, self.recent_lengths)
        episodes.count = self.episodes_count
        return TrainingProgress(episodes, self.env_frames, self.updates, self.trained_steps, self.wall_time,
                                self.reached_at)


def _write_atomically(path: Path, payload: dict[str, Any], reserve_bytes: int) -> None:
    """Write atomically and durably: a kill, a crash or a full disk mid-write leaves the previous
    checkpoint in place and no temporary file behind."""
    import torch

    ensure_free_space(path, reserve_bytes, "checkpoint")
    temporary = path.with_name(path.name + ".writing")
    try:
        with os.fdopen(create_private_file(temporary), "wb") as stream:
            torch.save({"format": CHECKPOINT_FORMAT, **payload}, stream)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except (OSError, RuntimeError) as error:  # torch reports a failed write as a RuntimeError
        temporary.unlink(missing_ok=True)
        raise StorageFullError(f"checkpoint {path} not written: {failure_reason(error)}; "
                               "the previous one is intact") from None
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    try:
        fsync_folder(path.parent)
    except OSError as error:
        raise StorageFullError(f"checkpoint {path} written, but its folder could not be synced to disk: "
                               f"{error}") from None


def _read(path: Path, missing: str) -> dict[str, Any]:
    """A checkpoint's payload; a missing, foreign or damaged file is a ValueError naming it."""
    if not path.is_file():
        raise ValueError(f"no checkpoint at {path}: {missing}")
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises several kinds for truncated or foreign files
        raise ValueError(f"checkpoint {path} cannot be read: {error}") from None
    if not isinstance(state, dict) or state.pop("format", None) != CHECKPOINT_FORMAT:
        raise ValueError(f"{path} is not a checkpoint of this version (format {CHECKPOINT_FORMAT})")
    return state


def save_checkpoint(path: str | Path, checkpoint: TrainingCheckpoint, reserve_bytes: int = 0) -> None:
    _write_atomically(Path(path), asdict(checkpoint), reserve_bytes)


def load_checkpoint(path: str | Path) -> TrainingCheckpoint:
    state = _read(Path(path), "the run saved none (storage.checkpoint_interval_seconds)")
    if "kind" in state:
        raise ValueError(f"{path} is the checkpoint of a {state['kind']} run, not of a training run")
    return TrainingCheckpoint(**state)


def _storable(tree: Any) -> Any:
    """numpy arrays and scalars as tensors and Python numbers, the rest of the tree as it is."""
    if isinstance(tree, np.ndarray):
        import torch

        return torch.from_numpy(np.ascontiguousarray(tree).copy())
    if isinstance(tree, np.generic):
        return tree.item()
    if isinstance(tree, dict):
        return {key: _storable(value) for key, value in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_storable(value) for value in tree)
    return tree


def _arrays(tree: Any) -> Any:
    """The inverse of `_storable`: every tensor back to a numpy array."""
    import torch

    if isinstance(tree, torch.Tensor):
        return tree.numpy()
    if isinstance(tree, dict):
        return {key: _arrays(value) for key, value in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_arrays(value) for value in tree)
    return tree


def save_run_state(path: str | Path, kind: str, state: dict[str, Any], reserve_bytes: int = 0) -> None:
    """Save an evolution run's state (`kind`: its algorithm) atomically; arrays become tensors."""
    _write_atomically(Path(path), {"kind": kind, "state": _storable(state)}, reserve_bytes)


def load_run_state(path: str | Path, kind: str) -> dict[str, Any]:
    """The state `save_run_state` saved for `kind`, tensors back as numpy arrays; a missing or
    foreign checkpoint is a ValueError naming it."""
    payload = _read(Path(path), "the run finished no interval or generation before it stopped")
    if payload.get("kind") != kind:
        raise ValueError(f"{path} is not the checkpoint of a {kind} run")
    return _arrays(payload["state"])


class Checkpointable(Protocol):
    def checkpoint(self) -> TrainingCheckpoint: ...


class Checkpointer:
    """An observer that saves the trainer's state every `interval_seconds` and when training ends.

    It must come after the metrics recorder among the observers: it flushes the run file so the
    file holds every row the checkpoint covers.
    """

    def __init__(self, trainer: Checkpointable, writer: RunWriter, path: str | Path,
                 interval_seconds: float | None, reserve_bytes: int = 0) -> None:
        self.trainer, self.writer, self.path = trainer, writer, Path(path)
        self.reserve_bytes = reserve_bytes
        self.interval_seconds = interval_seconds
        self.last_saved = time.monotonic()
        self.saved = 0

    def save(self) -> None:
        if self.writer.is_open:
            self.writer.flush()
        save_checkpoint(self.path, self.trainer.checkpoint(), self.reserve_bytes)
        self.last_saved = time.monotonic()
        self.saved += 1

    def on_update_end(self, report: UpdateReport) -> None:
        if self.interval_seconds is not None and time.monotonic() - self.last_saved >= self.interval_seconds:
            self.save()

    def on_train_end(self, result: TrainResult) -> None:
        self.save()
