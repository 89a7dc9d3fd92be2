"""NSGA-II (Deb et al. 2002) as ask/tell over arrays: binary tournament on (rank, crowding), the
variation it is given, then elitist survival of the best fronts. It never evaluates anything
itself, so the same object runs serially, on Ray workers or inside a test.

The operators are parameters, not subclass hooks: the initial sampling, the crossover, the
mutation, and how duplicates are recognised and changed again. The defaults are those of the
paper and of pymoo (uniform sampling within the bounds, SBX, polynomial mutation, a child equal
to a member or an earlier child is a duplicate); the game-balancing test passes the lineup
operators and the game testing search the action-sequence ones, and both stay NSGA-II."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .ask_tell import population_from_state
from .coding import Coding
from .operators import crowded_tournament
from .population import IdCounter, Population, PopulationView, orphans
from .ranking import rank_and_crowding
from .variation import Crossover, Mutation, make_crossover, make_mutation

Sampling = Callable[[np.random.Generator, int], np.ndarray]  # (rng, count) -> genomes [count, d]
DuplicateKey = Callable[[np.ndarray], np.ndarray]  # genomes [n, d] -> rows equal exactly for duplicates


class NSGA2(PopulationView):
    def __init__(self, lower: np.ndarray, upper: np.ndarray, population_size: int, rng: np.random.Generator,
                 crossover_eta: float = 15.0, crossover_probability: float = 0.9, mutation_eta: float = 20.0, *,
                 sampling: Sampling | None = None, crossover: Crossover | None = None,
                 mutation: Mutation | None = None, duplicate_key: DuplicateKey | None = None,
                 duplicate_mutation: Mutation | None = None) -> None:
        """`sampling`, `crossover` and `mutation` default to uniform sampling within the bounds,
        SBX (crossover_eta, crossover_probability) and polynomial mutation (mutation_eta);
        `duplicate_key` (default: the genome) says which children are duplicates, and
        `duplicate_mutation` (default: `mutation`) changes them again."""
        if population_size < 2 or population_size % 2:
            raise ValueError(f"population_size must be an even number >= 2, got {population_size}")
        self.lower, self.upper = np.asarray(lower, float), np.asarray(upper, float)
        self.population_size = population_size
        self.rng = rng
        self.crossover_eta, self.crossover_probability, self.mutation_eta = crossover_eta, crossover_probability, mutation_eta
        bounds = Coding.real(self.lower, self.upper)
        self.sampling: Sampling = sampling if sampling is not None else bounds.sample
        self.crossover = crossover if crossover is not None else make_crossover(
            "sbx", bounds, crossover_probability, crossover_eta)
        self.mutation = mutation if mutation is not None else make_mutation("polynomial", bounds, mutation_eta)
        self.duplicate_key = duplicate_key
        self.duplicate_mutation = duplicate_mutation if duplicate_mutation is not None else self.mutation
        self.population: Population | None = None  # parent ids are -1 for the initial population
        self.counter = IdCounter()
        self._rank: np.ndarray | None = None
        self._crowding: np.ndarray | None = None
        self._pending_parents: np.ndarray | None = None
        self.told_ids: np.ndarray | None = None
        self.told_parent_ids: np.ndarray | None = None
        self.told_objectives: np.ndarray | None = None

    @property
    def asked_parent_ids(self) -> np.ndarray | None:
        """[n, 2] parents of the genomes of the last ask (-1 for the initial population)."""
        return self._pending_parents

    def _tournament(self, count: int) -> np.ndarray:
        assert self._rank is not None and self._crowding is not None
        return crowded_tournament(self._rank, self._crowding, count, self.rng)

    def ask(self, count: int | None = None) -> np.ndarray:
        """Genomes to evaluate next: a sampled population first, then offspring of the current one.
        `count` keeps only the first `count` of them (a budget that ends mid-generation); the
        random draws are those of a whole generation either way."""
        if self.genomes is None:
            genomes = np.asarray(self.sampling(self.rng, self.population_size), float)
            self._pending_parents = orphans(len(genomes))
        else:
            mothers, fathers = self._tournament(self.population_size // 2), self._tournament(self.population_size // 2)
            child_a, child_b = self.crossover(self.genomes[mothers], self.genomes[fathers], self.rng)
            genomes = self._without_duplicates(self.mutation(np.concatenate([child_a, child_b]), self.rng))
            assert self.ids is not None
            pairs = np.column_stack([self.ids[mothers], self.ids[fathers]])
            self._pending_parents = np.concatenate([pairs, pairs])
        if count is not None:
            genomes, self._pending_parents = genomes[:count], self._pending_parents[:count]
        return genomes

    def _keys(self, genomes: np.ndarray) -> np.ndarray:
        return genomes if self.duplicate_key is None else self.duplicate_key(genomes)

    def _without_duplicates(self, offspring: np.ndarray, max_rounds: int = 10) -> np.ndarray:
        """Mutate again any child that is a duplicate of a member or an earlier child: a copy costs
        an evaluation and adds nothing (pymoo removes duplicates the same way)."""
        assert self.genomes is not None
        for _ in range(max_rounds):
            seen = self._keys(np.concatenate([self.genomes, offspring]))
            _, first = np.unique(seen, axis=0, return_index=True)
            duplicate = np.ones(len(seen), dtype=bool)
            duplicate[first] = False
            duplicate = duplicate[len(self.genomes):]
            if not duplicate.any():
                break
            offspring[duplicate] = self.duplicate_mutation(offspring[duplicate], self.rng)
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
        """Continue as the NSGA-II whose `state_dict()` this is (same bounds, size and operators)."""
        self.counter.next_id = int(state["next_id"])
        self.rng.bit_generator.state = state["rng"]
        saved = state["population"]
        self.population = population_from_state(saved)
        self._rank = None if saved is None else np.asarray(saved["rank"])
        self._crowding = None if saved is None else np.asarray(saved["crowding"], float)
        self._pending_parents = None

    def tell(self, genomes: np.ndarray, objectives: np.ndarray, population_objectives: np.ndarray | None = None) -> None:
        """Objectives [n, m] of the genomes from `ask`; keeps the best population_size of parents and
        offspring. `population_objectives` [population_size, m], when given, replaces the current
        members' objectives before survival: for objectives that change as the run goes on (the
        game testing search's novelty, which falls as states are seen again)."""
        parents = self._pending_parents if self._pending_parents is not None else orphans(len(genomes))
        newborn = Population(np.asarray(genomes, float), np.asarray(objectives, float), self.counter.take(len(genomes)),
                             parents)
        self.told_ids, self.told_parent_ids = newborn.ids, newborn.parent_ids  # lineage of the individuals just told
        self.told_objectives = newborn.objectives
        pool = newborn
        if self.population is not None:
            current = self.population
            if population_objectives is not None:
                current = Population(current.genomes, np.asarray(population_objectives, float).reshape(
                    current.objectives.shape), current.ids, current.parent_ids)
            pool = current.concatenate(newborn)
        rank, crowding = rank_and_crowding(pool.objectives)
        survivors = np.lexsort((-crowding, rank))[: self.population_size]
        self.population = pool.take(survivors)
        self._rank, self._crowding = rank[survivors], crowding[survivors]
        self._pending_parents = None
