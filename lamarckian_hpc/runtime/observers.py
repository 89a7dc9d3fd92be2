"""What a trainer tells the outside world after each update, what the population workflow tells it
after each generation, and the observers that listen.

The trainer does not know about files or terminals: the HDF5 recorder, the console progress and the
live sinks (TensorBoard, Weights & Biases, MLflow: `runtime.sinks`) subscribe to `on_update_end`, so
a test can train with none of them and a new sink never changes the training loop. The population
workflow writes its run file itself and then hands the same generation to its observers
(`on_generation_end`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # actor processes import this module: h5py stays out of them
    import numpy as np

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


@dataclass(frozen=True)
class GenerationReport:
    """One generation of a population run, as its run file got it (after the flush)."""

    generation: int  # the metrics' policy_version in the run file (PBT: the interval)
    env_frames: int  # the x axis of the generation's metric row (env frames, episodes or evaluations)
    wall_time: float  # seconds since the run started
    metrics: dict[str, float]
    rows: dict[str, np.ndarray] | None = None  # the /population rows of the generation
    #: the rows are the population's members slot by slot (PBT): row k is member slot k every generation
    members: bool = False


class GenerationObserver(Protocol):
    def on_generation_end(self, report: GenerationReport) -> None: ...
