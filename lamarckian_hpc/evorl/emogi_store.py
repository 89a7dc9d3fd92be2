"""EMOGI's record in the run file: the population history while it runs, the policies at the end.

Every generation goes to the run file's `/population` (ids, parent ids, the reward weights as the
named genome, the two objectives, wall time, worker, env frames) and a row of metrics, flushed at
once so that a reader follows the run. SWMR forbids creating datasets once writing started, and a
policy's arrays are only known when it has trained, so the policies and the behaviour measures go
into an `/emogi` group written after the writer closed the file:

- `/emogi/behaviour/{id, normalized_score, activeness, win_rate, point_difference}`: every policy
  evaluated (NaN where its training failed);
- `/emogi/population_ids`, `/emogi/front_ids`: the final population and its non-dominated set;
- `/emogi/policies/<id>/<parameter>`: every trained policy's weights (a model state dict).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import h5py
import numpy as np

from ..config.emogi import EMOGIConfig
from ..storage import RunWriter
from .behaviour import BEHAVIOUR_NAMES, GENOME_NAMES
from .emogi import EMOGIResult, GenerationReport

GROUP = "emogi"
METRIC_NAMES: tuple[str, ...] = ("front_size", "best_normalized_score", "front_activeness_min",
                                 "front_activeness_max", "evaluation_failures", "generation_seconds")


def population_shape() -> tuple[int, int, tuple[str, ...]]:
    return len(GENOME_NAMES), 2, GENOME_NAMES


class EMOGIRecorder:
    """Writes each generation to the run file and reports a progress line."""

    def __init__(self, writer: RunWriter, config: EMOGIConfig, report: Callable[[str], None] | None = None) -> None:
        self.writer, self.config, self.report = writer, config, report
        self.behaviours: dict[int, np.ndarray] = {}
        self._last = 0.0

    def continue_from(self, result: EMOGIResult) -> None:
        """Go on after the generations of `result` (a resumed run's): its behaviours and clock."""
        self.behaviours = {m.id: m.behaviour.as_row() for m in result.history if m.behaviour is not None}
        self._last = result.wall_time

    def __call__(self, report: GenerationReport) -> None:
        members = report.individuals
        self.writer.append_population({
            "generation": np.full(len(members), report.generation), "id": np.array([m.id for m in members]),
            "parent_ids": np.array([m.parent_ids for m in members]), "genome": np.array([m.genome for m in members]),
            "objectives": np.array([m.objectives for m in members]), "wall_time": np.array([m.wall_time for m in members]),
            "worker": np.array([m.worker for m in members]), "env_frames": np.array([m.env_frames for m in members]),
        })
        for member in members:
            if member.behaviour is not None:
                self.behaviours[member.id] = member.behaviour.as_row()
        front = np.array([self.behaviours[int(i)] for i in report.front_ids if int(i) in self.behaviours])
        scores = front[:, 0] if len(front) else np.array([np.nan])
        activeness = front[:, 1] if len(front) else np.array([np.nan])
        frames = sum(m.env_frames for m in members)
        self.writer.append_many({
            "front_size": float(len(report.front_ids)), "best_normalized_score": float(np.max(scores)),
            "front_activeness_min": float(np.min(activeness)), "front_activeness_max": float(np.max(activeness)),
            "evaluation_failures": float(report.failures), "generation_seconds": report.wall_time - self._last,
        }, env_frames=frames, policy_version=report.generation, wall_time=report.wall_time)
        self.writer.flush()
        self._last = report.wall_time
        if self.report is not None:
            self.report(f"generation {report.generation + 1}/{self.config.algorithm.generations}  "
                        f"front {len(report.front_ids)}  score {np.min(scores):.2f}-{np.max(scores):.2f}  "
                        f"activeness {np.min(activeness):.2f}-{np.max(activeness):.2f}  "
                        f"failures {report.failures}  {report.wall_time:.0f}s")


def write_results(path: str | Path, result: EMOGIResult) -> None:
    """Add the `/emogi` group to a run file its writer has closed."""
    with h5py.File(path, "r+", locking="best-effort") as file:
        group = file.require_group(GROUP)
        measured = [m for m in result.history if m.behaviour is not None]
        failed = [m for m in result.history if m.behaviour is None]
        rows = [m.behaviour.as_row() for m in measured] + [np.full(len(BEHAVIOUR_NAMES), np.nan) for _ in failed]
        table = np.array(rows).reshape(-1, len(BEHAVIOUR_NAMES))
        behaviour = group.create_group("behaviour")
        behaviour.create_dataset("id", data=np.array([m.id for m in measured + failed], dtype=np.int64))
        for k, name in enumerate(BEHAVIOUR_NAMES):
            behaviour.create_dataset(name, data=table[:, k])
        group.create_dataset("population_ids", data=np.asarray(result.population_ids, dtype=np.int64))
        group.create_dataset("front_ids", data=np.asarray(result.front_ids, dtype=np.int64))
        policies = group.create_group("policies")
        for identifier, weights in sorted(result.policies.items()):
            policy = policies.create_group(str(identifier))
            for name, array in weights.items():
                policy.create_dataset(name, data=array)


@dataclass
class StoredResults:
    behaviour: dict[str, np.ndarray]  # columns id and BEHAVIOUR_NAMES
    population_ids: np.ndarray
    front_ids: np.ndarray
    policies: dict[int, dict[str, np.ndarray]]


def read_results(path: str | Path) -> StoredResults:
    """The `/emogi` group of a finished run (KeyError when the run did not finish)."""
    with h5py.File(path, "r", swmr=True, locking="best-effort") as file:
        group = file[GROUP]
        return StoredResults(
            {name: dataset[()] for name, dataset in group["behaviour"].items()}, group["population_ids"][()],
            group["front_ids"][()],
            {int(identifier): {name: dataset[()] for name, dataset in policy.items()}
             for identifier, policy in group["policies"].items()})
