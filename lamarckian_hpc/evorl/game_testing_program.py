"""Automated game testing (`games.testing.GameTestingSearch`) as a program of the population
workflow (`population.workflow`): each generation's action sequences are played on the workers
(in this process by default, or forked, or on Ray actors: an episode is a pure function of its
genome and the episode seed, so it plays the same anywhere), their outcomes come back as plain
data (`EpisodeOutcome.to_plain`), and the search scores novelty, records bugs and selects here,
where the state archive of every episode so far lives."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from ..config.game_testing import GameTestingConfig
from ..games.data import GameData
from ..games.testing import EpisodePlayer, GameTestingSearch, SearchResult
from ..population.worker_pool import Request, WorkerError, WorkerFailure, WorkerPool
from ..population.workflow import GenerationalProgram, GenerationRecord, PopulationRuntime, run_population

#: The `kind` of a game testing run's checkpoint (`runtime.learner.checkpoint.save_run_state`).
CHECKPOINT_KIND = "wuji"
METRIC_NAMES = ("bugs_found", "distinct_states", "best_win", "generation_seconds")


class GameTestingProgram(GenerationalProgram):
    """Runs until `algorithm.episodes` episodes were played (the last generation may be short)."""

    kind = CHECKPOINT_KIND
    metric_names = METRIC_NAMES

    def __init__(self, config: GameTestingConfig, data: GameData) -> None:
        spec = config.algorithm
        self.config, self.data = config, data
        self.search = GameTestingSearch(data.testing.max_decisions, spec.population_size, config.seed,
                                        spec.crossover_probability, spec.mutation_rate)
        self.generation, self.wall_time = 0, 0.0
        self.genomes = np.zeros((0, data.testing.max_decisions), np.int64)
        self.history: list[dict] = []  # per generation of this process: the selected population

    def host_factory(self) -> Callable[[list[int]], EpisodePlayer]:
        return functools.partial(EpisodePlayer, self.data, self.config.seed)

    def finished_reason(self) -> str | None:
        episodes, budget = self.search.findings.episodes, self.config.algorithm.episodes
        return f"it played {episodes} episodes, algorithm.episodes={budget}" if episodes >= budget else None

    def ask(self) -> list[Request]:
        self.genomes = self.search.ask(self.config.algorithm.episodes - self.search.findings.episodes)
        return [Request("play", (genome,)) for genome in self.genomes]

    def tell(self, answers: list[Any], pool: WorkerPool, wall_time: float) -> GenerationRecord:
        for answer in answers:  # a battle reports its own crashes as symptoms: a failure here is the worker's
            if isinstance(answer, WorkerFailure):
                raise WorkerError(f"game testing worker {answer.pid}: {answer.reason}")
        self.search.tell(self.genomes, answers)
        members = self.search.population
        assert members is not None
        count, seconds = len(members.ids), wall_time - self.wall_time
        rows = {"generation": np.full(count, self.generation), "id": members.ids, "parent_ids": members.parent_ids,
                "genome": members.genomes, "objectives": members.objectives, "wall_time": np.full(count, seconds),
                "worker": np.zeros(count, dtype=np.int64)}
        self.history.append({"generation": self.generation, "genomes": members.genomes, "objectives": members.objectives,
                             "ids": members.ids, "parent_ids": members.parent_ids})
        found = self.result()
        metrics = {"bugs_found": float(len(found.bugs)), "distinct_states": float(found.distinct_states),
                   "best_win": found.best_win, "generation_seconds": seconds}
        self.generation, self.wall_time = self.generation + 1, wall_time
        return GenerationRecord(metrics, found.episodes, rows)

    def result(self) -> SearchResult:
        return self.search.result(self.history)

    def state_dict(self) -> dict[str, Any]:
        return {**self.search.state_dict(), "generation": self.generation, "wall_time": self.wall_time}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.search.load_state_dict(state)
        self.generation, self.wall_time = int(state["generation"]), float(state["wall_time"])


def search(data: GameData, episodes: int, population_size: int = 20, seed: int = 0,
           crossover_probability: float = 0.9, mutation_rate: float | None = None,
           mode: str = "serial", num_workers: int | None = None) -> SearchResult:
    """The search until `episodes` episodes were played, on the workflow's workers (the library
    entry point; `evolve` adds the run file, the checkpoint and the bug reports)."""
    config = GameTestingConfig.model_validate({
        "seed": seed, "runtime": {"mode": mode, "num_workers": num_workers},
        "algorithm": {"population_size": population_size, "episodes": episodes,
                      "crossover_probability": crossover_probability, "mutation_rate": mutation_rate}})
    program = GameTestingProgram(config, data)
    run_population(program, PopulationRuntime.of(config.runtime))
    return program.result()
