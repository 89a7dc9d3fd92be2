"""Single-objective genetic algorithm as ask/tell over arrays, for any coding: tournament
selection, then the crossover and mutation it is given (see `ec.variation` for the ones that fit
each coding). Two variants:

- ``generational``: each round breeds population_size - elite_count offspring, which replace
  everyone but the elite_count best members (elitism keeps the best found so far).
- ``steady_state``: each round breeds a few offspring (offspring_per_step), and the
  population_size best of members and offspring survive (offspring win ties, so the population
  can drift across plateaus).

Like NSGA-II it never evaluates anything itself; objectives are minimised.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import numpy as np

from .ask_tell import population_from_state, population_state
from .operators import tournament
from .population import IdCounter, Population, PopulationView, best_of, orphans
from .variation import Crossover, Mutation

GAVariant = Literal["generational", "steady_state"]
Initializer = Callable[[np.random.Generator, int], np.ndarray]


class GA(PopulationView):
    def __init__(self, initialize: Initializer, population_size: int, rng: np.random.Generator, crossover: Crossover,
                 mutation: Mutation, variant: GAVariant = "generational", elite_count: int = 1,
                 tournament_size: int = 2, offspring_per_step: int = 2) -> None:
        if variant not in ("generational", "steady_state"):
            raise ValueError(f"variant must be generational or steady_state, got {variant!r}")
        if population_size < 2:
            raise ValueError(f"population_size must be >= 2, got {population_size}")
        if not 0 <= elite_count < population_size:
            raise ValueError(f"elite_count must be in [0, population_size), got {elite_count}")
        if tournament_size < 1 or offspring_per_step < 1:
            raise ValueError("tournament_size and offspring_per_step must be >= 1")
        self.initialize, self.population_size, self.rng = initialize, population_size, rng
        self.crossover, self.mutation, self.variant = crossover, mutation, variant
        self.elite_count, self.tournament_size, self.offspring_per_step = elite_count, tournament_size, offspring_per_step
        self.population: Population | None = None
        self.counter = IdCounter()
        self._pending_parents: np.ndarray | None = None
        self.told_ids: np.ndarray | None = None  # lineage of the individuals told last
        self.told_parent_ids: np.ndarray | None = None
        self.told_objectives: np.ndarray | None = None

    @property
    def asked_parent_ids(self) -> np.ndarray | None:
        """[n, 2] parents of the genomes of the last ask (-1 for the initial population)."""
        return self._pending_parents

    def state_dict(self) -> dict:
        """The population, the next id and the generator as arrays and numbers (between a tell and
        the next ask); the operators and the variant are the configuration's, not state."""
        return {"next_id": self.counter.next_id, "rng": self.rng.bit_generator.state,
                "population": population_state(self.population)}

    def load_state_dict(self, state: dict) -> None:
        """Continue as the GA whose `state_dict()` this is (same size, variant and operators)."""
        self.counter.next_id = int(state["next_id"])
        self.rng.bit_generator.state = state["rng"]
        self.population = population_from_state(state["population"])
        self._pending_parents = None

    @property
    def best(self) -> tuple[np.ndarray, float]:
        """The best genome found so far and its objective (elitism or survival keeps it in the population)."""
        return best_of(self.population)

    def _offspring_count(self) -> int:
        return self.population_size - self.elite_count if self.variant == "generational" else self.offspring_per_step

    def ask(self) -> np.ndarray:
        """Genomes to evaluate next: the initial population first, then offspring of the current one."""
        if self.population is None:
            genomes = np.asarray(self.initialize(self.rng, self.population_size), float)
            self._pending_parents = orphans(len(genomes))
            return genomes
        count = self._offspring_count()
        pairs = (count + 1) // 2
        fitness = self.population.objectives[:, 0]
        mothers = tournament(fitness, pairs, self.rng, self.tournament_size)
        fathers = tournament(fitness, pairs, self.rng, self.tournament_size)
        child_a, child_b = self.crossover(self.population.genomes[mothers], self.population.genomes[fathers], self.rng)
        offspring = self.mutation(np.concatenate([child_a, child_b]), self.rng)
        couples = np.column_stack([self.population.ids[mothers], self.population.ids[fathers]])
        self._pending_parents = np.concatenate([couples, couples])[:count]
        return offspring[:count]

    def tell(self, genomes: np.ndarray, objectives: np.ndarray) -> None:
        """Objectives [n] or [n, 1] of the genomes from `ask`; builds the next population."""
        objectives = np.asarray(objectives, float).reshape(len(genomes), -1)
        if objectives.shape[1] != 1:
            raise ValueError(f"the GA is single-objective; got {objectives.shape[1]} objectives per genome")
        parents = self._pending_parents if self._pending_parents is not None else orphans(len(genomes))
        newborn = Population(np.asarray(genomes, float), objectives, self.counter.take(len(genomes)), parents)
        self.told_ids, self.told_parent_ids, self.told_objectives = newborn.ids, newborn.parent_ids, newborn.objectives
        self._pending_parents = None
        if self.population is None:
            self.population = newborn
            return
        if self.variant == "generational":
            elites = np.argsort(self.population.objectives[:, 0], kind="stable")[: self.elite_count]
            self.population = self.population.take(elites).concatenate(newborn)
            return
        pool = newborn.concatenate(self.population)  # offspring first: they win ties under a stable sort
        survivors = np.argsort(pool.objectives[:, 0], kind="stable")[: self.population_size]
        self.population = pool.take(survivors)
