"""NSGA-II (Deb et al. 2002) as ask/tell over arrays: binary tournament on (rank, crowding), SBX
and polynomial mutation, then elitist survival of the best fronts. It never evaluates anything
itself, so the same object runs serially, on Ray workers or inside a test."""

from __future__ import annotations

import numpy as np

from .operators import crowded_tournament, polynomial_mutation, sbx
from .population import IdCounter, Population, PopulationView, orphans
from .ranking import rank_and_crowding


class NSGA2(PopulationView):
    def __init__(self, lower: np.ndarray, upper: np.ndarray, population_size: int, rng: np.random.Generator,
                 crossover_eta: float = 15.0, crossover_probability: float = 0.9, mutation_eta: float = 20.0) -> None:
        if population_size < 2 or population_size % 2:
            raise ValueError(f"population_size must be an even number >= 2, got {population_size}")
        self.lower, self.upper = np.asarray(lower, float), np.asarray(upper, float)
        self.population_size = population_size
        self.rng = rng
        self.crossover_eta, self.crossover_probability, self.mutation_eta = crossover_eta, crossover_probability, mutation_eta
        self.population: Population | None = None  # parent ids are -1 for the initial population
        self.counter = IdCounter()
        self._rank: np.ndarray | None = None
        self._crowding: np.ndarray | None = None
        self._pending_parents: np.ndarray | None = None
        self.told_ids: np.ndarray | None = None
        self.told_parent_ids: np.ndarray | None = None

    def _tournament(self, count: int) -> np.ndarray:
        assert self._rank is not None and self._crowding is not None
        return crowded_tournament(self._rank, self._crowding, count, self.rng)

    def ask(self) -> np.ndarray:
        """Genomes to evaluate next: a random population first, then offspring of the current one."""
        d = len(self.lower)
        if self.genomes is None:
            self._pending_parents = orphans(self.population_size)
            return self.lower + self.rng.random((self.population_size, d)) * (self.upper - self.lower)
        mothers, fathers = self._tournament(self.population_size // 2), self._tournament(self.population_size // 2)
        child_a, child_b = sbx(self.genomes[mothers], self.genomes[fathers], self.lower, self.upper, self.rng,
                               self.crossover_eta, self.crossover_probability)
        offspring = polynomial_mutation(np.concatenate([child_a, child_b]), self.lower, self.upper, self.rng,
                                        self.mutation_eta)
        offspring = self._without_duplicates(offspring)
        assert self.ids is not None
        pairs = np.column_stack([self.ids[mothers], self.ids[fathers]])
        self._pending_parents = np.concatenate([pairs, pairs])
        return offspring

    def _without_duplicates(self, offspring: np.ndarray, max_rounds: int = 10) -> np.ndarray:
        """Mutate again any child identical to a member or an earlier child: a copy costs an
        evaluation and adds nothing (pymoo removes duplicates the same way)."""
        assert self.genomes is not None
        for _ in range(max_rounds):
            seen = np.concatenate([self.genomes, offspring])
            _, first = np.unique(seen, axis=0, return_index=True)
            duplicate = np.ones(len(seen), dtype=bool)
            duplicate[first] = False
            duplicate = duplicate[len(self.genomes):]
            if not duplicate.any():
                break
            offspring[duplicate] = polynomial_mutation(offspring[duplicate], self.lower, self.upper, self.rng,
                                                       self.mutation_eta)
        return offspring

    def state_dict(self) -> dict:
        """The population, its ranks and crowding, the next id and the generator, as arrays and
        numbers (for a checkpoint between a tell and the next ask)."""
        population = self.population
        return {"next_id": self.counter.next_id, "rng": self.rng.bit_generator.state,
                "population": None if population is None else {
                    "genomes": population.genomes, "objectives": population.objectives, "ids": population.ids,
                    "parent_ids": population.parent_ids, "rank": self._rank, "crowding": self._crowding}}

    def load_state_dict(self, state: dict) -> None:
        """Continue as the NSGA-II whose `state_dict()` this is (same bounds and size)."""
        self.counter.next_id = int(state["next_id"])
        self.rng.bit_generator.state = state["rng"]
        saved = state["population"]
        self.population = None if saved is None else Population(
            np.asarray(saved["genomes"], float), np.asarray(saved["objectives"], float),
            np.asarray(saved["ids"], np.int64), np.asarray(saved["parent_ids"], np.int64))
        self._rank = None if saved is None else np.asarray(saved["rank"])
        self._crowding = None if saved is None else np.asarray(saved["crowding"], float)
        self._pending_parents = None

    def tell(self, genomes: np.ndarray, objectives: np.ndarray) -> None:
        """Objectives [n, m] of the genomes from `ask`; keeps the best population_size of parents and offspring."""
        parents = self._pending_parents if self._pending_parents is not None else orphans(len(genomes))
        newborn = Population(np.asarray(genomes, float), np.asarray(objectives, float), self.counter.take(len(genomes)),
                             parents)
        self.told_ids, self.told_parent_ids = newborn.ids, newborn.parent_ids  # lineage of the individuals just told
        pool = newborn if self.population is None else self.population.concatenate(newborn)
        rank, crowding = rank_and_crowding(pool.objectives)
        survivors = np.lexsort((-crowding, rank))[: self.population_size]
        self.population = pool.take(survivors)
        self._rank, self._crowding = rank[survivors], crowding[survivors]
        self._pending_parents = None
