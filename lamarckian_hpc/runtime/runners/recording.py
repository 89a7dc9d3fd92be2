"""Records each update's metrics and the recorded episodes into the run's HDF5 file, flushing at
the configured interval."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from ...config import RunConfig, StorageConfig, TrajectoriesConfig
from ...mdp import EpisodeResult, RecordedSteps
from ...storage import MEGABYTE, RunWriter
from ...storage.trajectories import EpisodeRecord, TrajectorySpec
from ..observers import TrainResult, UpdateReport
from ..run_shape import recorded_every


def trajectory_spec(spaces: tuple[Any, Any], policy_id: str) -> TrajectorySpec:
    """The trajectory datasets of `policy_id` acting in these (observation, action) spaces."""
    observation_space, action_space = spaces
    discrete = np.issubdtype(action_space.dtype, np.integer)
    return TrajectorySpec(policy_id, tuple(observation_space.shape),
                          "uint8" if observation_space.dtype == np.uint8 else "float32",
                          tuple(action_space.shape or ()), "int64" if discrete else "float32")


def trajectory_specs(config: RunConfig, spaces: tuple[Any, Any], policy_id: str) -> list[TrajectorySpec]:
    """The run file's trajectory datasets for `policy_id`; none when the run records no episodes."""
    return [trajectory_spec(spaces, policy_id)] if recorded_every(config) else []


def _writer_options(settings: TrajectoriesConfig, specs: list[TrajectorySpec]) -> dict[str, Any]:
    return {"trajectories": specs, "trajectory_compression": settings.compression,
            "max_trajectory_bytes": int(settings.max_megabytes * MEGABYTE)}


def trajectory_writer_options(config: RunConfig, spaces: tuple[Any, Any], *policy_ids: str) -> dict[str, Any]:
    """RunWriter's keyword arguments for the run's recorded episodes (one group per policy)."""
    return _writer_options(config.storage.trajectories,
                           [spec for policy_id in policy_ids for spec in trajectory_specs(config, spaces, policy_id)])


def population_writer_options(storage: StorageConfig, spaces: tuple[Any, Any], *policy_ids: str) -> dict[str, Any]:
    """RunWriter's keyword arguments for the episodes a population's members record (a league's
    learners, an EMOGI run's policies), one group per policy id, by a population config's
    `storage.trajectories`."""
    settings = storage.trajectories
    return _writer_options(settings, [trajectory_spec(spaces, policy_id) for policy_id in policy_ids]
                           if settings.every_episodes else [])


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


def recorded_answers(first_episode: int, completed: Iterable[EpisodeResult], env_frames: int,
                     policy_id: str | None = None) -> list[dict[str, Any]]:
    """The recorded episodes among `completed` (of `policy_id` only, when given) as plain data for
    a population worker's answer: the member's number of each (`first_episode` counts its episodes
    before these), its return, the member's env frames and the steps. The driver tags them with
    the member, generation and opponent (`tagged_record`) and writes them."""
    answers = []
    for index, result in enumerate(r for r in completed if policy_id is None or r.policy_id == policy_id):
        if result.recorded is not None:
            answers.append({"episode": first_episode + index, "return": float(result.episode_return),
                            "env_frames": int(env_frames), "steps": result.recorded.to_plain()})
    return answers


def tagged_record(policy_id: str, answer: dict[str, Any], actor: int, host: str, wall_time: float, member: int,
                  generation: int, opponent: str = "") -> EpisodeRecord:
    """A recorded episode of a worker's answer (`recorded_answers`), tagged with whose it is."""
    steps = RecordedSteps.from_plain(answer["steps"])
    return EpisodeRecord(policy_id, steps.agent_id, steps.observations, steps.actions, steps.rewards,
                         steps.policy_versions, steps.terminated, int(answer["episode"]), float(answer["return"]),
                         actor, host, int(answer["env_frames"]), wall_time, member, generation, opponent)


class MetricsRecorder:
    #: What rank 0 of a learner group tells the other ranks it is doing while it records.
    stage = "metrics"

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
