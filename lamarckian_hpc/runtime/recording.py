"""Records each update's metrics and the recorded episodes into the run's HDF5 file, flushing at
the configured interval."""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from ..config import RunConfig
from ..mdp import RecordedSteps
from ..storage import MEGABYTE, RunWriter
from ..storage.trajectories import EpisodeRecord, TrajectorySpec
from .observers import TrainResult, UpdateReport
from .sampling import recorded_every


def trajectory_spec(spaces: tuple[Any, Any], policy_id: str) -> TrajectorySpec:
    """The trajectory datasets of `policy_id` acting in these (observation, action) spaces."""
    observation_space, action_space = spaces
    discrete = np.issubdtype(action_space.dtype, np.integer)
    return TrajectorySpec(policy_id, tuple(observation_space.shape),
                          "uint8" if observation_space.dtype == np.uint8 else "float32",
                          tuple(action_space.shape or ()), "int64" if discrete else "float32")


def trajectory_specs(config: RunConfig, spaces: tuple[Any, Any], policy_id: str) -> list[TrajectorySpec]:
    """The run file's trajectory datasets for `policy_id`; none when the run records no episodes."""
    return [] if recorded_every(config) == 0 else [trajectory_spec(spaces, policy_id)]


def trajectory_writer_options(config: RunConfig, spaces: tuple[Any, Any], *policy_ids: str) -> dict[str, Any]:
    """RunWriter's keyword arguments for the run's recorded episodes (one group per policy)."""
    settings = config.storage.trajectories
    return {"trajectories": [spec for policy_id in policy_ids for spec in trajectory_specs(config, spaces, policy_id)],
            "trajectory_compression": settings.compression,
            "max_trajectory_bytes": int(settings.max_megabytes * MEGABYTE)}


class RecordedEpisodes:
    """The recorded episodes a trainer received since its last report, numbered as the run counts
    episodes (`RecentEpisodes.count` before the message's episodes were added)."""

    def __init__(self, policy_id: str) -> None:
        self.policy_id = policy_id
        self._pending: list[tuple[int, float, RecordedSteps, int, str]] = []

    def add(self, first_episode: int, returns: np.ndarray | list[float],
            recorded: Iterable[tuple[int, RecordedSteps]], actor: int, host: str) -> None:
        """`recorded` pairs an index among the `returns` of the episodes just counted with its steps."""
        for index, steps in recorded:
            self._pending.append((first_episode + index, float(returns[index]), steps, actor, host))

    def take(self, env_frames: int, wall_time: float) -> tuple[EpisodeRecord, ...]:
        pending, self._pending = self._pending, []
        return tuple(EpisodeRecord(self.policy_id, steps.agent_id, steps.observations, steps.actions, steps.rewards,
                                   steps.policy_versions, steps.terminated, number, episode_return, actor, host,
                                   env_frames, wall_time)
                     for number, episode_return, steps, actor, host in pending)


class MetricsRecorder:
    def __init__(self, writer: RunWriter, interval_seconds: float) -> None:
        self.writer = writer
        self.interval_seconds = interval_seconds
        self._cap_noted = False

    def on_update_end(self, report: UpdateReport) -> None:
        self.writer.append_many(
            report.metrics, env_frames=report.env_frames, policy_version=report.policy_version,
            wall_time=report.wall_time,
        )
        for record in report.recorded:
            if not self.writer.append_episode(record) and self.writer.trajectories_stopped and not self._cap_noted:
                self.writer.update_meta({"trajectories_stopped_at_env_frames": report.env_frames})
                self._cap_noted = True
        self.writer.flush_if_due(self.interval_seconds)

    def on_train_end(self, result: TrainResult) -> None:
        self.writer.close()
