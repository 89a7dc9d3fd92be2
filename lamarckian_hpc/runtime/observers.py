"""What a trainer tells the outside world after each update, and the observers that listen.

The trainer does not know about files or terminals: the HDF5 recorder and the console progress
subscribe to `on_update_end`, so a test can train with neither and a new sink never changes the
training loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # actor processes import this module: h5py stays out of them
    from ..storage.trajectories import EpisodeRecord


@dataclass(frozen=True)
class UpdateReport:
    update: int
    env_frames: int
    trained_steps: int
    wall_time: float
    policy_version: int
    episodes: int
    recent_return_mean: float | None
    metrics: dict[str, float] = field(default_factory=dict)
    recorded: tuple[EpisodeRecord, ...] = ()  # episodes recorded since the previous report, for the run file


@dataclass(frozen=True)
class TrainResult:
    run_path: Path | None
    env_frames: int
    wall_time_seconds: float
    updates: int
    trained_steps: int
    episodes: int
    recent_return_mean: float | None
    target_reached_at_frames: int | None
    sampling_frames_per_second: float


class TrainObserver(Protocol):
    def on_update_end(self, report: UpdateReport) -> None: ...

    def on_train_end(self, result: TrainResult) -> None: ...
