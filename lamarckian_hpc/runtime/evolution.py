"""The evolution driver: runs an ask/tell EC algorithm, evaluating its offspring serially or
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
from ..ec import NSGA2, Problem, dtlz2, hypervolume, zdt
from ..storage import RunWriter

log = logging.getLogger(__name__)


def make_problem(config: EvolveConfig) -> Problem:
    spec = config.problem
    if spec.name == "dtlz2":
        return dtlz2(3, spec.num_variables or 12)
    return zdt(int(spec.name[-1]), spec.num_variables or 30)


def evaluate_one(problem: Problem, genome: np.ndarray, delay_seconds: float) -> tuple[np.ndarray, float, int]:
    """Objectives of one genome, its evaluation wall time and the worker's pid."""
    start = time.perf_counter()
    if delay_seconds:
        time.sleep(delay_seconds)
    objectives = problem.evaluate(genome[None, :])[0]
    return objectives, time.perf_counter() - start, os.getpid()


@dataclass(frozen=True)
class Evaluations:
    objectives: np.ndarray  # [n, m]; inf where an evaluation failed
    wall_times: np.ndarray  # [n]
    workers: np.ndarray  # [n] process ids
    failures: int


class Evaluator(Protocol):
    def evaluate(self, genomes: np.ndarray) -> Evaluations: ...

    def close(self) -> None: ...


class SerialEvaluator:
    def __init__(self, problem: Problem, delay_seconds: float = 0.0) -> None:
        self.problem, self.delay_seconds = problem, delay_seconds

    def evaluate(self, genomes: np.ndarray) -> Evaluations:
        results = [evaluate_one(self.problem, genome, self.delay_seconds) for genome in genomes]
        return Evaluations(np.array([r[0] for r in results]), np.array([r[1] for r in results]),
                           np.array([r[2] for r in results]), 0)

    def close(self) -> None:
        pass


class RayEvaluator:
    """Each genome is a Ray task; results are gathered as they complete, in any order."""

    def __init__(self, problem: Problem, config: EvolveConfig) -> None:
        import ray

        self.ray = ray
        self.started_ray = False
        if not ray.is_initialized():
            common = {"include_dashboard": False, "logging_level": logging.WARNING}
            if config.runtime.ray_address:
                ray.init(address=config.runtime.ray_address, **common)
            else:
                ray.init(num_cpus=config.runtime.num_workers or os.cpu_count() or 1,
                         object_store_memory=100 * 1024 * 1024, **common)
                self.started_ray = True
        self.task = ray.remote(num_cpus=1, max_retries=0)(evaluate_one)
        self.problem_ref = ray.put(problem)
        self.delay_seconds = config.problem.evaluation_delay_seconds
        self.timeout_seconds = config.runtime.evaluation_timeout_seconds
        self.num_objectives = problem.num_objectives

    def evaluate(self, genomes: np.ndarray) -> Evaluations:
        ray = self.ray
        pending = {self.task.remote(self.problem_ref, genome, self.delay_seconds): index
                   for index, genome in enumerate(genomes)}
        objectives = np.full((len(genomes), self.num_objectives), np.inf)
        wall_times, workers = np.full(len(genomes), np.nan), np.full(len(genomes), -1)
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
                    objectives[index], wall_times[index], workers[index] = ray.get(reference)
                except Exception as error:  # a failed evaluation must not stop the generation
                    failures += 1
                    log.error("evaluation of individual %d failed: %s", index, error)
        return Evaluations(objectives, wall_times, workers, failures)

    def close(self) -> None:
        if self.started_ray:
            self.ray.shutdown()


GenerationHook = Callable[[int, NSGA2, np.ndarray, Evaluations], None]


def evolve(config: EvolveConfig, evaluator: Evaluator, on_generation: GenerationHook | None = None) -> NSGA2:
    """Run NSGA-II for `config.algorithm.generations` generations (the initial one included)."""
    problem = make_problem(config)
    spec = config.algorithm
    algorithm = NSGA2(problem.lower, problem.upper, spec.population_size, np.random.default_rng(config.seed),
                      spec.crossover_eta, spec.crossover_probability, spec.mutation_eta)
    for generation in range(spec.generations):
        genomes = algorithm.ask()
        evaluations = evaluator.evaluate(genomes)
        algorithm.tell(genomes, evaluations.objectives)
        if on_generation is not None:
            on_generation(generation, algorithm, genomes, evaluations)
    return algorithm


class GenerationRecorder:
    """Writes each generation to the run file: every evaluated individual into the population
    history, and the generation's hypervolume, failures and duration as metrics."""

    METRIC_NAMES = ("hypervolume", "evaluation_failures", "generation_seconds")

    def __init__(self, writer: RunWriter, config: EvolveConfig, num_objectives: int,
                 report: Callable[[str], None] | None = None, report_every: int = 10) -> None:
        self.writer, self.config, self.report, self.report_every = writer, config, report, report_every
        self.reference = np.full(num_objectives, 1.1)
        self.start = self._last = time.monotonic()

    def __call__(self, generation: int, algorithm: NSGA2, genomes: np.ndarray, evaluations: Evaluations) -> None:
        now = time.monotonic()
        self.writer.append_population({
            "generation": np.full(len(genomes), generation), "id": algorithm.told_ids,
            "parent_ids": algorithm.told_parent_ids, "genome": genomes, "objectives": evaluations.objectives,
            "wall_time": evaluations.wall_times, "worker": evaluations.workers,
        })
        volume = hypervolume(algorithm.objectives, self.reference)
        self.writer.append_many({"hypervolume": volume, "evaluation_failures": float(evaluations.failures),
                                 "generation_seconds": now - self._last},
                                env_frames=(generation + 1) * len(genomes), policy_version=generation,
                                wall_time=now - self.start)
        self.writer.flush_if_due(self.config.storage.metrics_interval_seconds)
        last_generation = generation == self.config.algorithm.generations - 1
        if self.report is not None and (generation % self.report_every == 0 or last_generation):
            self.report(f"generation {generation + 1}/{self.config.algorithm.generations}  hypervolume "
                        f"{volume:.4f}  failures {evaluations.failures}  {now - self.start:.1f}s")
        self._last = now
