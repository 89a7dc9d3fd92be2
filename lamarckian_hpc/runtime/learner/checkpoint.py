"""Training state that survives the process: a run killed, crashed or requeued at its time limit
continues from its last checkpoint with the same policy version, optimizer, frames and RNG.

A checkpoint sits next to its run file (`<run>.ckpt`, always the newest: `--resume` and a Slurm
requeue continue from it). A training run may keep more (`storage.keep_last_checkpoints`,
`storage.keep_best_checkpoint`) in the folder `<run>.checkpoints/`: `v<policy version>.ckpt` for
each of the newest k, and `best.ckpt`, the one whose mean return over the last
`stop.return_window` episodes (the return the stop rule reads) was the highest when it was saved.
They are hard links to the newest (no second copy on disk; a copy where the file system has no
hard links), put in place under a temporary name and renamed, so they are as whole as it is. It is written with `torch.save` to a
temporary name (`<run>.ckpt.writing`, private to its owner from the moment it exists), synced to
disk, renamed, and its folder synced, so a kill or a crash of the machine mid-write leaves the
previous checkpoint whole and a finished one is never lost to the page cache. A write that fails
(a full device: `OSError`, or the `RuntimeError` torch raises for it) removes the temporary file
and is one StorageFullError. It is read with `weights_only=True`, so that loading a checkpoint
cannot execute code. Before each checkpoint
the run file is flushed: every metric row up to the checkpoint's policy version is on disk, and a
resumed run keeps exactly those rows (`storage.continue_run_file`).

A run resumes from its newest checkpoint unless told otherwise (`--checkpoint best` or a file).
One older than the newest the run has (`newer_checkpoints`) is refused unless forced: resuming
from it drops the run file's rows past it at once and, at its first save, the newer checkpoints,
and a mistyped `--checkpoint` should not cost that. A checkpoint whose learner state does not fit
the run's learner (another architecture, another environment's spaces, another algorithm, state
missing) is one `CheckpointMismatch` line naming what differs (`check_fits`), found before any
`load_state_dict` (whose own errors are a TypeError, a KeyError or many lines of torch's text).

Evolution runs (PBT+PPO, EMOGI, game testing) keep their state in the same kind of file, through
`save_run_state` and `load_run_state`: a tree of dicts, lists, numbers and numpy arrays (stored as
tensors, since `weights_only` loading refuses numpy objects), tagged with the algorithm's name.

torch is imported by the functions that need it, not with the module: a training run imports
this module before it starts Ray, and it imports torch meanwhile (`ray_setup.start_ray_while_importing`).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ...storage import RunWriter, StorageFullError, create_private_file, ensure_free_space, failure_reason, fsync_folder
from ..observers import TrainResult, UpdateReport
from .episodes import RecentEpisodes

log = logging.getLogger(__name__)

CHECKPOINT_FORMAT = 1


#: What `resolve_checkpoint` takes besides a path: the newest checkpoint, or the best one.
CHECKPOINT_CHOICES = ("last", "best")
_VERSIONED = re.compile(r"v(\d+)\.ckpt")


def checkpoint_path(run_path: str | Path) -> Path:
    """The newest checkpoint of a run: `<run>.ckpt`."""
    return Path(run_path).with_suffix(".ckpt")


def checkpoints_folder(run_path: str | Path) -> Path:
    """Where a training run keeps its older and its best checkpoints: `<run>.checkpoints/`."""
    return Path(run_path).with_suffix(".checkpoints")


def best_checkpoint_path(run_path: str | Path) -> Path:
    return checkpoints_folder(run_path) / "best.ckpt"


def versioned_checkpoints(run_path: str | Path) -> dict[int, Path]:
    """The kept checkpoints `<run>.checkpoints/v<version>.ckpt`, by policy version, oldest first."""
    folder = checkpoints_folder(run_path)
    found = {}
    if folder.is_dir():
        for entry in folder.iterdir():
            match = _VERSIONED.fullmatch(entry.name)
            if match:
                found[int(match.group(1))] = entry
    return dict(sorted(found.items()))


def resolve_checkpoint(run_path: str | Path, which: str | Path = "last") -> Path:
    """The checkpoint file `which` names for the run at `run_path`: "last" (`<run>.ckpt`), "best"
    (`<run>.checkpoints/best.ckpt`) or a path; a ValueError naming what is missing otherwise."""
    if str(which) == "last":
        path = checkpoint_path(run_path)
        if not path.is_file():
            raise ValueError(f"no checkpoint at {path}: the run saved none (storage.checkpoint_interval_seconds)")
    elif str(which) == "best":
        path = best_checkpoint_path(run_path)
        if not path.is_file():
            raise ValueError(f"no best checkpoint at {path}: the run kept none (storage.keep_best_checkpoint, "
                             "and it needs a finished episode before a save)")
    else:
        path = Path(which)
        if not path.is_file():
            raise ValueError(f"no checkpoint at {path}: give last, best or the path of a checkpoint file")
    return path


def checkpoint_score(checkpoint: TrainingCheckpoint) -> float | None:
    """What makes a checkpoint the best: the mean return over the recent-episodes window when it was
    saved (the return the stop rule and `episode_return_mean` read); None before any episode ended."""
    return float(np.mean(checkpoint.recent_returns)) if checkpoint.recent_returns else None


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


def _place_copy(source: Path, target: Path) -> None:
    """`target` becomes the file `source` is, whole or not at all: a hard link (or, where the file
    system has none, a copy) under a temporary name, synced, renamed over `target`."""
    temporary = target.with_name(target.name + ".writing")
    temporary.unlink(missing_ok=True)
    try:
        try:
            os.link(source, temporary)
        except OSError:  # no hard links here: a copy, private as the checkpoint is
            with open(source, "rb") as reading, os.fdopen(create_private_file(temporary), "wb") as writing:
                shutil.copyfileobj(reading, writing)
                writing.flush()
                os.fsync(writing.fileno())
        os.replace(temporary, target)
        fsync_folder(target.parent)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        raise StorageFullError(f"checkpoint {target} not written: {failure_reason(error)}; "
                               f"{source} is intact") from None


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
    names = {item.name for item in fields(TrainingCheckpoint)}
    missing, unexpected = sorted(names - set(state)), sorted(set(state) - names)
    if missing or unexpected:
        raise CheckpointMismatch(f"checkpoint {path} is not a training checkpoint of this version: "
                                 + "; ".join(f"{what}: {', '.join(keys)}" for what, keys in
                                             (("missing", missing), ("unexpected", unexpected)) if keys))
    return TrainingCheckpoint(**state)


def newer_checkpoints(run_path: str | Path, version: int) -> dict[Path, int]:
    """The run's checkpoints (`<run>.ckpt` and the kept `v<version>.ckpt`) of a policy version
    after `version`, oldest first: what resuming from a checkpoint at `version` abandons. A
    `<run>.ckpt` that cannot be read counts as none (there is nothing in it to lose)."""
    newer = {path: kept for kept, path in versioned_checkpoints(run_path).items() if kept > version}
    try:
        newest = load_checkpoint(checkpoint_path(run_path)).policy_version
    except ValueError:
        newest = None
    if newest is not None and newest > version:
        newer[checkpoint_path(run_path)] = newest
    return dict(sorted(newer.items(), key=lambda item: item[1]))


class CheckpointMismatch(ValueError):
    """A checkpoint that does not fit the run's learner, or is not a training checkpoint; one line
    naming what differs."""


@dataclass
class _Differences:
    shapes: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)


def _holds_tensors(tree: Any) -> bool:
    import torch

    if isinstance(tree, torch.Tensor):
        return True
    if isinstance(tree, Mapping):
        return any(_holds_tensors(value) for value in tree.values())
    if isinstance(tree, (list, tuple)):
        return any(_holds_tensors(value) for value in tree)
    return False


def _compare(model: Any, saved: Any, where: str, differences: _Differences) -> None:
    """Walk the model's state tree beside the checkpoint's, noting every difference in shape or layout."""
    import torch

    if model is None or saved is None:  # an optional part (SAC's alpha optimizer with a fixed alpha)
        return
    if isinstance(model, torch.Tensor):
        if not isinstance(saved, torch.Tensor):
            differences.shapes.append(f"'{where}' is a {type(saved).__name__} in the checkpoint and a tensor "
                                      f"of shape {tuple(model.shape)} in the model")
        elif saved.shape != model.shape:
            differences.shapes.append(f"'{where}' has shape {tuple(saved.shape)} in the checkpoint and "
                                      f"{tuple(model.shape)} in the model")
        return
    if isinstance(model, Mapping):
        if not isinstance(saved, Mapping):
            differences.shapes.append(f"'{where}' is a {type(saved).__name__} in the checkpoint and a dict in "
                                      "the model")
        elif model:  # an empty one grows with training (the optimizer's moments before its first step)
            for key, value in model.items():
                if key in saved:
                    _compare(value, saved[key], f"{where}.{key}" if where else str(key), differences)
                else:
                    differences.missing.append(f"{where}.{key}" if where else str(key))
            # an extra setting (torch.optim.Adam's flags) is harmless; extra tensors are state this run would drop
            differences.unexpected += [f"{where}.{key}" if where else str(key) for key, value in saved.items()
                                       if key not in model and _holds_tensors(value)]
        return
    if isinstance(model, (list, tuple)):
        if not isinstance(saved, (list, tuple)) or len(saved) != len(model):
            count = f"{len(saved)} entries" if isinstance(saved, (list, tuple)) else f"a {type(saved).__name__}"
            differences.shapes.append(f"'{where}' has {count} in the checkpoint and {len(model)} entries in "
                                      "the model")
        else:
            for index, (value, kept) in enumerate(zip(model, saved)):
                _compare(value, kept, f"{where}.{index}", differences)


def _listed(names: list[str], shown: int = 4) -> str:
    """The first `shown` names, whole parts first (another algorithm's `target` before a layer's bias)."""
    names = sorted(names, key=lambda name: name.count("."))
    more = f" ({len(names)} in all)" if len(names) > shown else ""
    return ", ".join(names[:shown]) + (", ..." if more else "") + more


def check_fits(source: str | Path, saved: Mapping[str, Any], model: Mapping[str, Any]) -> None:
    """CheckpointMismatch, one line, unless the learner state `saved` in checkpoint `source` fits
    `model`, the state of the learner this run built (`learner.state_dict()`): the same entries,
    every tensor of the same shape. Checked before `load_state_dict`, which reports the same
    mistakes as a TypeError, a KeyError or many lines of torch's text. Settings without tensors
    are not compared (a state saved by `torch.optim.Adam` carries more flags than `rl.adam.Adam`),
    nor is an entry that is empty in the model (optimizer moments before the first step) or None
    on either side."""
    differences = _Differences()
    _compare(model, saved, "", differences)
    parts = differences.shapes[:2] + ([f"{len(differences.shapes) - 2} more differ in shape"]
                                       if len(differences.shapes) > 2 else [])
    parts += [f"{what}: {_listed(names)}" for what, names in
              (("missing", differences.missing), ("unexpected", differences.unexpected)) if names]
    if parts:
        raise CheckpointMismatch(f"checkpoint {source} does not fit this run: {'; '.join(parts)}")


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
    """An observer that saves the trainer's state every `interval_seconds` and when training ends,
    to `<run>.ckpt`, and keeps the newest `keep_last` and (with `keep_best`) the best-scoring
    checkpoint (`checkpoint_score`) in `<run>.checkpoints/`.

    It must come after the metrics recorder among the observers: it flushes the run file so the
    file holds every row the checkpoint covers. `resumed_from`: the policy version the run
    continues from; the best checkpoint kept so far stays the best to beat.

    Kept checkpoints past `resumed_from` (there are some only where a resume from an older one was
    forced) belong to the abandoned continuation. They stay untouched until this run saves its
    first checkpoint, so a resume that fails before then loses none of them, and are removed at
    that save with a warning naming them, rather than kept: their names are the versions this
    continuation writes next, so kept they would pass for its own (its v<N>.ckpt replacing theirs
    one by one), and keeping the newest k by version would remove its checkpoints before them.
    """

    #: What rank 0 of a learner group tells the other ranks it is doing while it saves.
    stage = "checkpoint"

    def __init__(self, trainer: Checkpointable, writer: RunWriter, run_path: str | Path,
                 interval_seconds: float | None, reserve_bytes: int = 0, *, keep_last: int = 1,
                 keep_best: bool = False, resumed_from: int | None = None) -> None:
        self.trainer, self.writer = trainer, writer
        self.run_path, self.path = Path(run_path), checkpoint_path(run_path)
        self.reserve_bytes = reserve_bytes
        self.interval_seconds = interval_seconds
        self.keep_last, self.keep_best = keep_last, keep_best
        self.last_saved = time.monotonic()
        self.saved = 0
        self.best_score: float | None = None
        self.resumed_from = resumed_from
        if resumed_from is not None:
            best = best_checkpoint_path(self.run_path)
            if keep_best and best.is_file():
                self.best_score = checkpoint_score(load_checkpoint(best))

    def save(self) -> None:
        if self.writer.is_open:
            self.writer.flush()
        checkpoint = self.trainer.checkpoint()
        save_checkpoint(self.path, checkpoint, self.reserve_bytes)
        if self.saved == 0 and self.resumed_from is not None:
            self._drop_abandoned(self.resumed_from)
        self._keep(checkpoint)
        self.last_saved = time.monotonic()
        self.saved += 1

    def _drop_abandoned(self, resumed_from: int) -> None:
        """Remove the kept checkpoints past `resumed_from`, saying which (see the class docstring)."""
        abandoned = {version: path for version, path in versioned_checkpoints(self.run_path).items()
                     if version > resumed_from}
        for path in abandoned.values():
            path.unlink()
        if abandoned:
            log.warning("removed the checkpoints kept after policy version %d, the continuation abandoned by "
                        "resuming from it: %s", resumed_from, ", ".join(str(path) for path in abandoned.values()))

    def _keep(self, checkpoint: TrainingCheckpoint) -> None:
        """The newest `keep_last` as versioned links, the best one as `best.ckpt`."""
        score = checkpoint_score(checkpoint)
        better = self.keep_best and score is not None and (self.best_score is None or score > self.best_score)
        folder = checkpoints_folder(self.run_path)
        if self.keep_last > 1 or better:
            folder.mkdir(mode=0o700, exist_ok=True)
        if self.keep_last > 1:
            _place_copy(self.path, folder / f"v{checkpoint.policy_version}.ckpt")
        kept = list(versioned_checkpoints(self.run_path).values())  # with k = 1, <run>.ckpt alone
        for path in kept[:max(0, len(kept) - self.keep_last) if self.keep_last > 1 else len(kept)]:
            path.unlink()
        if better:
            _place_copy(self.path, best_checkpoint_path(self.run_path))
            self.best_score = score

    def on_update_end(self, report: UpdateReport) -> None:
        if self.interval_seconds is not None and time.monotonic() - self.last_saved >= self.interval_seconds:
            self.save()

    def on_train_end(self, result: TrainResult) -> None:
        self.save()
