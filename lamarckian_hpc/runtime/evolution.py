"""The evolution driver: runs an ask/tell EC algorithm (NSGA-II or the GA), evaluating its offspring serially or
asynchronously on Ray (the paper's Fig. 1), and records every generation in the run file.

On Ray each offspring is its own task; results are collected as each one finishes, and selection
runs once the whole generation is back. A slow evaluation only delays its own result, and one
that fails or times out gets the worst objectives (infinity) instead of stopping the run.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np

from ..config import EvolveConfig
from ..ec import Evaluator, hypervolume
from ..ec.evaluator import evaluate_one
from ..storage import RunWriter
from .evolve_components import EvolutionAlgorithm, hypervolume_reference, make_algorithm, make_problem

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class Evaluations:
    objectives: np.ndarray  # [n, m]; inf where an evaluation failed
    wall_times: np.ndarray  # [n]
    workers: np.ndarray  # [n] process ids
    failures: int
    hosts: np.ndarray  # [n] host names ("" where an evaluation failed)


class EvaluationBackend(Protocol):
    """Where an `ec.Evaluator` runs: in this process or on Ray workers."""

    def evaluate(self, genomes: np.ndarray) -> Evaluations: ...

    def close(self) -> None: ...


class SerialEvaluator:
    """Evaluates one genome after the other in this process (debuggable, and the reference that
    the Ray backend must reproduce)."""

    def __init__(self, evaluator: Evaluator, delay_seconds: float = 0.0) -> None:
        self.evaluator, self.delay_seconds = evaluator, delay_seconds

    def evaluate(self, genomes: np.ndarray) -> Evaluations:
        results = [evaluate_one(self.evaluator, genome, self.delay_seconds) for genome in genomes]
        return Evaluations(np.array([r[0] for r in results]), np.array([r[1] for r in results]),
                           np.array([r[2] for r in results]), 0, np.array([r[3] for r in results], dtype=object))

    def close(self) -> None:
        pass


class RayEvaluator:
    """Each genome is a Ray task; results are gathered as they complete, in any order."""

    def __init__(self, evaluator: Evaluator, config: EvolveConfig) -> None:
        import ray

        from .ray_setup import ensure_ray

        self.ray = ray
        self.started_ray = ensure_ray(config.runtime.ray_address, config.runtime.num_workers or os.cpu_count() or 1)
        # SPREAD: on a multi-node cluster the evaluations run on every node, not first on the driver's.
        self.task = ray.remote(num_cpus=1, max_retries=0, scheduling_strategy="SPREAD")(evaluate_one)
        self.evaluator_ref = ray.put(evaluator)  # shipped to the object store once, not with every task
        self.delay_seconds = config.problem.evaluation_delay_seconds
        self.timeout_seconds = config.runtime.evaluation_timeout_seconds
        self.num_objectives = evaluator.describe().num_objectives

    def evaluate(self, genomes: np.ndarray) -> Evaluations:
        ray = self.ray
        pending = {self.task.remote(self.evaluator_ref, genome, self.delay_seconds): index
                   for index, genome in enumerate(genomes)}
        objectives = np.full((len(genomes), self.num_objectives), np.inf)
        wall_times, workers = np.full(len(genomes), np.nan), np.full(len(genomes), -1)
        hosts = np.full(len(genomes), "", dtype=object)
        failures = 0
        deadline = time.monotonic() + self.timeout_seconds
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
            if not done:  # the stragglers ran out of time: cancel them, keep the worst objectives
                for reference in pending:
                    ray.cancel(reference, force=True)
                failures += len(pending)
                break
            for reference in done:
                index = pending.pop(reference)
                try:
                    objectives[index], wall_times[index], workers[index], hosts[index] = ray.get(reference)
                except Exception as error:  # a failed evaluation must not stop the generation
                    failures += 1
                    log.error("evaluation of individual %d failed: %s", index, error)
        return Evaluations(objectives, wall_times, workers, failures, hosts)

    def close(self) -> None:
        if self.started_ray:
            from .ray_setup import shutdown_ray

            shutdown_ray()


GenerationHook = Callable[[int, EvolutionAlgorithm, np.ndarray, Evaluations], None]


def evolve(config: EvolveConfig, backend: EvaluationBackend, on_generation: GenerationHook | None = None,
           evaluator: Evaluator | None = None,
           start: tuple[EvolutionAlgorithm, int, np.ndarray | None] | None = None) -> EvolutionAlgorithm:
    """Run the configured algorithm for `config.algorithm.generations` ask/tell rounds (the initial
    population included), evaluating through `backend`; `evaluator` (default: the configured
    problem) supplies the coding and the initial genomes. `start` continues a replayed run: the
    algorithm, the generations it has done and the genomes it already asked for (or None)."""
    if start is None:
        algorithm = make_algorithm(config, evaluator if evaluator is not None else make_problem(config))
        first, pending = 0, None
    else:
        algorithm, first, pending = start
    for generation in range(first, config.algorithm.generations):
        genomes = pending if pending is not None else algorithm.ask()
        pending = None
        evaluations = backend.evaluate(genomes)
        algorithm.tell(genomes, evaluations.objectives)
        if on_generation is not None:
            on_generation(generation, algorithm, genomes, evaluations)
    return algorithm


class GenerationRecorder:
    """Writes each generation to the run file: every evaluated individual into the population
    history, and the generation's quality (hypervolume with several objectives, best and mean
    objective with one), failures and duration as metrics."""

    MULTI_OBJECTIVE_METRICS = ("hypervolume", "evaluation_failures", "generation_seconds")
    SINGLE_OBJECTIVE_METRICS = ("best_objective", "mean_objective", "evaluation_failures", "generation_seconds")
    METRIC_NAMES = MULTI_OBJECTIVE_METRICS  # kept for callers that record NSGA-II only

    def __init__(self, writer: RunWriter, config: EvolveConfig, num_objectives: int,
                 report: Callable[[str], None] | None = None, report_every: int = 10) -> None:
        self.writer, self.config, self.report, self.report_every = writer, config, report, report_every
        self.num_objectives = num_objectives
        self.reference = hypervolume_reference(config, num_objectives)
        self.start = self._last = time.monotonic()

    @classmethod
    def metric_names(cls, num_objectives: int) -> tuple[str, ...]:
        return cls.MULTI_OBJECTIVE_METRICS if num_objectives > 1 else cls.SINGLE_OBJECTIVE_METRICS

    def quality(self, algorithm: EvolutionAlgorithm) -> dict[str, float]:
        """The current population's quality metrics."""
        assert algorithm.objectives is not None
        if self.num_objectives > 1:
            return {"hypervolume": hypervolume(algorithm.objectives, self.reference)}
        values = algorithm.objectives[:, 0]
        finite = values[np.isfinite(values)]
        return {"best_objective": float(values.min()),
                "mean_objective": float(finite.mean()) if len(finite) else float("inf")}

    def summary(self, algorithm: EvolutionAlgorithm) -> list[tuple[str, str]]:
        """Rows of the result table printed at the end of a run."""
        if self.num_objectives > 1:
            reference = ", ".join(f"{value:g}" for value in self.reference)
            return [(f"hypervolume (reference {reference})", f"{self.quality(algorithm)['hypervolume']:.4f}")]
        return [("best objective", f"{self.quality(algorithm)['best_objective']:.6g}")]

    def __call__(self, generation: int, algorithm: EvolutionAlgorithm, genomes: np.ndarray,
                 evaluations: Evaluations) -> None:
        now = time.monotonic()
        quality = self.quality(algorithm)
        self.writer.append_many({**quality, "evaluation_failures": float(evaluations.failures),
                                 "generation_seconds": now - self._last},
                                env_frames=algorithm.counter.next_id, policy_version=generation,
                                wall_time=now - self.start)
        # The population rows are flushed at once, with the metrics above: a generation is on disk
        # whole or not at all, which is what `evolve --resume` relies on.
        self.writer.append_population({
            "generation": np.full(len(genomes), generation), "id": algorithm.told_ids,
            "parent_ids": algorithm.told_parent_ids, "genome": genomes, "objectives": evaluations.objectives,
            "wall_time": evaluations.wall_times, "worker": evaluations.workers, "host": evaluations.hosts,
        })
        last_generation = generation == self.config.algorithm.generations - 1
        if self.report is not None and (generation % self.report_every == 0 or last_generation):
            shown = "  ".join(f"{name.replace('_', ' ')} {value:.4g}" for name, value in quality.items())
            self.report(f"generation {generation + 1}/{self.config.algorithm.generations}  {shown}  "
                        f"failures {evaluations.failures}  {now - self.start:.1f}s")
        self._last = now
