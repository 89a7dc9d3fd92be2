"""One `evolve` run of NSGA-II or the GA, from config to closed run file, and its resumption.

Resuming needs no checkpoint of the algorithm: NSGA-II and the GA are deterministic for a seed and
the objectives they are told, and the run file's population history holds every generation's
genomes and objectives. So a resumed run rebuilds the algorithm from the seed and replays the
recorded generations (ask, check that the same genomes come out, tell the recorded objectives),
which restores the population, the ids and the random generator exactly; then it goes on
evaluating. A history that does not replay (a changed config, a changed problem) is refused.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from ..config import EvolveConfig
from ..ec.evaluator import Evaluator
from ..storage import MEGABYTE, RunWriter, continue_run_file, open_run
from .evolution import GenerationRecorder, RayEvaluator, SerialEvaluator, evolve
from .evolve_components import EvolutionAlgorithm, make_algorithm, make_problem


class EvolutionSetupError(ValueError):
    """The run cannot start as asked (a problem that cannot be built, a history that cannot be
    resumed); its message is one line for the user."""


class ReplayError(EvolutionSetupError):
    """The run file's history is not what this config produces; it cannot be resumed."""


@dataclass
class Replayed:
    algorithm: EvolutionAlgorithm
    generations: int  # complete generations replayed
    pending: np.ndarray | None  # genomes asked for the next generation (None: ask anew)
    wall_time: float  # seconds the run had spent


def replay(config: EvolveConfig, problem: Evaluator, run_path: str | Path) -> Replayed:
    """Rebuild the algorithm from the seed and the run file's recorded generations."""
    with open_run(run_path) as reader:
        history = reader.population()
        wall = reader.metrics().get("generation_seconds")
    algorithm = make_algorithm(config, problem)
    generations = 0
    recorded = history.get("generation", np.zeros(0, np.int64))
    while generations < config.algorithm.generations:
        rows = np.flatnonzero(recorded == generations)
        genomes = algorithm.ask()
        if len(rows) == 0:
            return Replayed(algorithm, generations, genomes, _elapsed(wall))
        if len(rows) != len(genomes) or not np.array_equal(np.asarray(genomes, np.float64), history["genome"][rows]):
            raise ReplayError(f"{run_path}: generation {generations} of the run file is not what this config asks "
                              "for; was the config, the problem or the package changed? It cannot be resumed")
        algorithm.tell(genomes, history["objectives"][rows])
        generations += 1
    return Replayed(algorithm, generations, None, _elapsed(wall))


def _elapsed(series: Any) -> float:
    return float(series.wall_time[-1]) if series is not None and len(series) else 0.0


@dataclass
class EvolutionOutcome:
    algorithm: EvolutionAlgorithm
    recorder: GenerationRecorder
    problem: Evaluator
    resumed_at_generation: int | None


def run_evolution(config: EvolveConfig, run_path: str | Path, *, resume: bool = False,
                  meta: Mapping[str, Any] | None = None, report: Callable[[str], None] | None = None,
                  on_start: Callable[[Path], None] | None = None) -> EvolutionOutcome:
    """Evolve, recording every generation to `run_path`; with `resume`, continue that file's run.

    Raises EvolutionSetupError (ReplayError among them) for a problem that cannot be built or a history
    that cannot be resumed, before anything is evaluated or written."""
    run_path = Path(run_path)
    try:
        problem = make_problem(config)
        replayed = replay(config, problem, run_path) if resume else None
    except ReplayError:
        raise
    except (ValueError, OSError, KeyError) as error:
        raise EvolutionSetupError(str(error)) from None
    reserve = int(config.storage.min_free_megabytes * MEGABYTE)
    names = GenerationRecorder.metric_names(problem.num_objectives)
    if replayed is not None:
        writer = continue_run_file(run_path, names, replayed.generations - 1, meta, min_free_bytes=reserve)
    else:
        writer = RunWriter(run_path, config.to_json_dict(), names, meta=meta, min_free_bytes=reserve,
                           population_shape=(problem.num_variables, problem.num_objectives))
    if on_start is not None:
        on_start(run_path)
    recorder = GenerationRecorder(writer, config, problem.num_objectives, report)
    if replayed is not None:
        recorder.start = recorder._last = time.monotonic() - replayed.wall_time
    backend = (SerialEvaluator(problem, config.problem.evaluation_delay_seconds) if config.runtime.mode == "serial"
               else RayEvaluator(problem, config))
    try:
        algorithm = evolve(config, backend, recorder, problem,
                           start=None if replayed is None else (replayed.algorithm, replayed.generations,
                                                                replayed.pending))
    except BaseException:
        writer.close(completed=False)
        raise
    finally:
        backend.close()
    writer.close()
    return EvolutionOutcome(algorithm, recorder, problem, None if replayed is None else replayed.generations)
