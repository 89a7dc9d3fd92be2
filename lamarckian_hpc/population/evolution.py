"""Evolution of plain solutions (NSGA-II, the GA, ES, CMA-ES, game balancing) as a program of the
population workflow (`population.workflow`): each generation's genomes are evaluated on the
workers, in this process or on any number of processes and nodes, collected as each finishes
(the paper's Fig. 1), and the algorithm is told them once the generation is back. A slow
evaluation only delays its own result, and one that fails or outlives `runtime.timeout_seconds`
gets the worst objectives (infinity) instead of stopping the run.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..config import EvolveConfig
from ..ec import Evaluator, hypervolume
from ..ec.evaluator import evaluate_one
from ..storage import RunWriter
from .evolve_components import EvolutionAlgorithm, hypervolume_reference, make_algorithm, make_problem
from .worker_pool import Request, WorkerFailure, WorkerPool
from .workflow import GenerationalProgram, GenerationRecord, PopulationRuntime, run_population

#: The `kind` of an evolve run's checkpoint (`runtime.learner.checkpoint.save_run_state`).
CHECKPOINT_KIND = "evolve"
MULTI_OBJECTIVE_METRICS = ("hypervolume", "evaluation_failures", "generation_seconds")
SINGLE_OBJECTIVE_METRICS = ("best_objective", "mean_objective", "evaluation_failures", "generation_seconds")


class EvaluatorHost:
    """What a worker of an evolve run hosts: the problem, evaluating one genome per request."""

    def __init__(self, evaluator: Evaluator, delay_seconds: float, slots: list[int]) -> None:
        self.evaluator, self.delay_seconds = evaluator, delay_seconds

    def evaluate(self, genome: np.ndarray) -> list[Any]:
        """[objectives, wall seconds, pid, host name]."""
        return list(evaluate_one(self.evaluator, np.asarray(genome, float), self.delay_seconds))


@dataclass(frozen=True)
class Evaluations:
    objectives: np.ndarray  # [n, m]; inf where an evaluation failed
    wall_times: np.ndarray  # [n]; nan where it failed
    workers: np.ndarray  # [n] process ids (-1 where it failed)
    hosts: np.ndarray  # [n] host names ("" where it failed)
    failures: int

    @classmethod
    def of(cls, answers: list[Any], num_objectives: int) -> Evaluations:
        """The answers of `EvaluatorHost.evaluate`, a `WorkerFailure` where one failed."""
        n = len(answers)
        objectives, wall_times = np.full((n, num_objectives), np.inf), np.full(n, np.nan)
        workers, hosts = np.full(n, -1), np.full(n, "", dtype=object)
        for index, answer in enumerate(answers):
            if not isinstance(answer, WorkerFailure):
                objectives[index], wall_times[index], workers[index], hosts[index] = answer
        return cls(objectives, wall_times, workers, hosts, sum(isinstance(a, WorkerFailure) for a in answers))


def metric_names(num_objectives: int) -> tuple[str, ...]:
    return MULTI_OBJECTIVE_METRICS if num_objectives > 1 else SINGLE_OBJECTIVE_METRICS


class EvolveProgram(GenerationalProgram):
    """An ask/tell algorithm over a stateless problem, for the population workflow."""

    kind = CHECKPOINT_KIND

    def __init__(self, config: EvolveConfig, problem: Evaluator | None = None, report_every: int = 10) -> None:
        self.config, self.report_every = config, report_every
        self.problem = problem if problem is not None else make_problem(config)
        self.num_objectives = self.problem.describe().num_objectives
        self.metric_names = metric_names(self.num_objectives)
        self.reference = hypervolume_reference(config, self.num_objectives)
        self.algorithm: EvolutionAlgorithm = make_algorithm(config, self.problem)
        self.generation, self.wall_time = 0, 0.0
        self.genomes: np.ndarray | None = None
        self.last_evaluations: Evaluations | None = None

    def host_factory(self) -> Callable[[list[int]], EvaluatorHost]:
        return functools.partial(EvaluatorHost, self.problem, self.config.problem.evaluation_delay_seconds)

    def ask(self) -> list[Request]:
        self.genomes = self.algorithm.ask()
        return [Request("evaluate", (genome,)) for genome in self.genomes]

    def quality(self) -> dict[str, float]:
        """The current population's quality: hypervolume with several objectives, the best and the
        mean objective with one."""
        objectives = self.algorithm.objectives
        assert objectives is not None
        if self.num_objectives > 1:
            return {"hypervolume": hypervolume(objectives, self.reference)}
        values = objectives[:, 0]
        finite = values[np.isfinite(values)]
        return {"best_objective": float(values.min()),
                "mean_objective": float(finite.mean()) if len(finite) else float("inf")}

    def summary(self) -> list[tuple[str, str]]:
        """Rows of the result table printed at the end of a run."""
        if self.num_objectives > 1:
            reference = ", ".join(f"{value:g}" for value in self.reference)
            return [(f"hypervolume (reference {reference})", f"{self.quality()['hypervolume']:.4f}")]
        return [("best objective", f"{self.quality()['best_objective']:.6g}")]

    def tell(self, answers: list[Any], pool: WorkerPool, wall_time: float) -> GenerationRecord:
        assert self.genomes is not None
        evaluations = Evaluations.of(answers, self.num_objectives)
        algorithm, genomes = self.algorithm, self.genomes
        algorithm.tell(genomes, evaluations.objectives)
        quality = self.quality()
        rows = {"generation": np.full(len(genomes), self.generation), "id": algorithm.told_ids,
                "parent_ids": algorithm.told_parent_ids, "genome": genomes, "objectives": evaluations.objectives,
                "wall_time": evaluations.wall_times, "worker": evaluations.workers, "host": evaluations.hosts}
        metrics = {**quality, "evaluation_failures": float(evaluations.failures),
                   "generation_seconds": wall_time - self.wall_time}
        total = self.config.algorithm.generations
        line = None
        if self.generation % self.report_every == 0 or self.generation == total - 1:
            shown = "  ".join(f"{name.replace('_', ' ')} {value:.4g}" for name, value in quality.items())
            line = (f"generation {self.generation + 1}/{total}  {shown}  failures {evaluations.failures}  "
                    f"{wall_time:.1f}s")
        self.generation, self.wall_time, self.genomes = self.generation + 1, wall_time, None
        self.last_evaluations = evaluations
        return GenerationRecord(metrics, int(algorithm.counter.next_id), rows, line)

    def state_dict(self) -> dict[str, Any]:
        return {"generation": self.generation, "wall_time": self.wall_time, "algorithm": self.algorithm.state_dict(),
                "population_size": int(len(self.algorithm.ids)) if self.algorithm.ids is not None else 0,
                "genome_length": self.problem.describe().genome_length}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.generation, self.wall_time = int(state["generation"]), float(state["wall_time"])
        self.algorithm.load_state_dict(state["algorithm"])

    def mismatch(self, state: dict[str, Any]) -> str | None:
        """Why a saved run cannot continue with this config (another problem or population), or None."""
        saved = state["program"]
        length = self.problem.describe().genome_length
        if int(saved["genome_length"]) != length:
            return f"the saved run's genomes have {int(saved['genome_length'])} variables, this problem's {length}"
        size = getattr(self.config.algorithm, "population_size", None)
        if size is not None and int(saved["population_size"]) not in (0, size):
            return f"algorithm.population_size is {size}, the saved run's population has {int(saved['population_size'])}"
        return None


def evolve(config: EvolveConfig, problem: Evaluator | None = None, writer: RunWriter | None = None,
           report: Callable[[str], None] | None = None) -> EvolutionAlgorithm:
    """Run the configured algorithm for `algorithm.generations` generations on the configured
    workers (the library entry point; `evolve` adds the run file's checkpoint and resume)."""
    program = EvolveProgram(config, problem)
    run_population(program, PopulationRuntime.of(config.runtime), writer, report=report)
    return program.algorithm

