"""EMOGI's record in the run file: the population history while it runs, the policies at the end.

Every generation goes to the run file's `/population` (ids, parent ids, the reward weights as the
named genome, the two objectives, wall time, worker, env frames) and a row of metrics, written by
the population workflow (`EMOGIProgram.tell` says what). SWMR forbids creating datasets once writing started, and a
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

import h5py
import numpy as np

from ..storage import FILE_FORMAT
from .behaviour import BEHAVIOUR_NAMES, GENOME_NAMES
from .emogi import EMOGIResult

GROUP = "emogi"


def population_shape() -> tuple[int, int, tuple[str, ...]]:
    return len(GENOME_NAMES), 2, GENOME_NAMES


def write_results(path: str | Path, result: EMOGIResult) -> None:
    """Add the `/emogi` group to a run file its writer has closed."""
    with h5py.File(path, "r+", libver=FILE_FORMAT, locking="best-effort") as file:  # the run file's format
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
