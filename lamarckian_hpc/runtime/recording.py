"""Records each update's metrics into the run's HDF5 file, flushing at the configured interval."""

from __future__ import annotations

from ..storage import RunWriter
from .observers import TrainResult, UpdateReport


class MetricsRecorder:
    def __init__(self, writer: RunWriter, interval_seconds: float) -> None:
        self.writer = writer
        self.interval_seconds = interval_seconds

    def on_update_end(self, report: UpdateReport) -> None:
        self.writer.append_many(
            report.metrics, env_frames=report.env_frames, policy_version=report.policy_version,
            wall_time=report.wall_time,
        )
        self.writer.flush_if_due(self.interval_seconds)

    def on_actors_connected(self, per_host: dict[str, int]) -> None:
        """/meta `actors_connected_per_host`, rewritten whenever an actor says hello."""
        self.writer.update_meta({"actors_connected_per_host": per_host,
                                 "actors_connected": int(sum(per_host.values()))})

    def on_train_end(self, result: TrainResult) -> None:
        self.writer.close()
