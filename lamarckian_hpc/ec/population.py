"""Population and Individual: genomes, objectives and lineage as arrays. Every algorithm (NSGA-II,
the GA, later PBT) keeps its members in one Population and numbers newborns with one IdCounter,
so the population history in the run file reads the same whatever produced it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NO_PARENT = -1


@dataclass(frozen=True)
class Individual:
    """One member, read out of a Population."""

    id: int
    parent_ids: tuple[int, int]  # (-1, -1) for members of the initial population
    genome: np.ndarray  # [genome_length]
    objectives: np.ndarray  # [num_objectives]


@dataclass(frozen=True)
class Population:
    genomes: np.ndarray  # [n, genome_length]
    objectives: np.ndarray  # [n, num_objectives]; minimised
    ids: np.ndarray  # [n] int64, unique over a run
    parent_ids: np.ndarray  # [n, 2] int64; NO_PARENT where there is none

    def __post_init__(self) -> None:
        n = len(self.genomes)
        if not (len(self.objectives) == len(self.ids) == len(self.parent_ids) == n):
            raise ValueError("population columns differ in length")

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> Individual:
        first, second = self.parent_ids[index]
        return Individual(int(self.ids[index]), (int(first), int(second)), self.genomes[index], self.objectives[index])

    def take(self, indices: np.ndarray) -> Population:
        """The members at `indices`, in that order."""
        return Population(self.genomes[indices], self.objectives[indices], self.ids[indices], self.parent_ids[indices])

    def concatenate(self, other: Population) -> Population:
        return Population(np.concatenate([self.genomes, other.genomes]),
                          np.concatenate([self.objectives, other.objectives]),
                          np.concatenate([self.ids, other.ids]), np.concatenate([self.parent_ids, other.parent_ids]))


class IdCounter:
    """Hands out run-unique ids to newborn individuals, in order."""

    def __init__(self, start: int = 0) -> None:
        self.next_id = start

    def take(self, count: int) -> np.ndarray:
        ids = np.arange(self.next_id, self.next_id + count, dtype=np.int64)
        self.next_id += count
        return ids


def orphans(count: int) -> np.ndarray:
    """Parent ids of `count` members with no parents (an initial population), [count, 2]."""
    return np.full((count, 2), NO_PARENT, dtype=np.int64)


def best_of(population: Population | None) -> tuple[np.ndarray, float]:
    """The genome with the lowest first objective and that objective (single-objective algorithms)."""
    if population is None:
        raise ValueError("nothing has been told yet")
    index = int(np.argmin(population.objectives[:, 0]))
    return population.genomes[index], float(population.objectives[index, 0])


class PopulationView:
    """The read-only view of the current population that every ask/tell algorithm gives (None
    before the first tell); the algorithm sets `self.population`."""

    population: Population | None

    @property
    def genomes(self) -> np.ndarray | None:
        """[population_size, d]."""
        return None if self.population is None else self.population.genomes

    @property
    def objectives(self) -> np.ndarray | None:
        """[population_size, m]."""
        return None if self.population is None else self.population.objectives

    @property
    def ids(self) -> np.ndarray | None:
        return None if self.population is None else self.population.ids

    @property
    def parent_ids(self) -> np.ndarray | None:
        """[population_size, 2]; -1 for members of the initial population."""
        return None if self.population is None else self.population.parent_ids
