"""The lineup as a decision vector, and variation operators that keep it valid.

A genome over H heroes is one row of 3H numbers: an ordering of the heroes (a permutation of
0..H-1; the lineup is its first K heroes, so no hero ever appears twice), then per hero the
soldier type it would lead and the index of the equipment it would carry. Loadout genes belong to
a hero, not a slot, so a hero keeps its loadout when crossover moves it. The permutation part is
varied by the travelling-salesman operators of `ec.operators` (order crossover) plus a swap that
always involves a lineup slot, so that every mutation changes the lineup; loadouts by uniform
crossover and reset. Every operator returns valid genomes (`LineupCoding.valid`), which
tests check over many draws."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from ..ec.coding import Coding
from ..ec.operators import order_crossover, uniform_crossover


@dataclass(frozen=True)
class LineupCoding:
    num_heroes: int  # H
    lineup_size: int  # K, teams per lineup
    num_soldiers: int
    equipment_choices: np.ndarray  # [H] allowed equipment per hero

    @property
    def length(self) -> int:
        return 3 * self.num_heroes

    def as_coding(self) -> Coding:
        """The bounds as an integer `ec.Coding` (for the run file and generic readers); validity
        also needs the permutation part, which `valid` checks."""
        h = self.num_heroes
        upper = np.concatenate([np.full(h, h - 1.0), np.full(h, self.num_soldiers - 1.0),
                                self.equipment_choices - 1.0])
        return Coding.integer(np.zeros(3 * h), upper)

    def sample(self, rng: np.random.Generator, count: int) -> np.ndarray:
        h = self.num_heroes
        order = np.argsort(rng.random((count, h)), axis=1)
        soldiers = rng.integers(0, self.num_soldiers, size=(count, h))
        equipment = np.floor(rng.random((count, h)) * self.equipment_choices).astype(np.int64)
        return np.concatenate([order, soldiers, equipment], axis=1).astype(float)

    def valid(self, genomes: np.ndarray) -> np.ndarray:
        """Per row: a permutation of the heroes, then soldier and equipment indices within bounds."""
        genomes = np.asarray(genomes, float)
        h = self.num_heroes
        if genomes.ndim != 2 or genomes.shape[1] != self.length:
            return np.zeros(len(genomes), dtype=bool)
        order_ok = (np.sort(genomes[:, :h], axis=1) == np.arange(h)).all(axis=1)
        return order_ok & self.as_coding().valid(genomes)

    def decode(self, genome: np.ndarray) -> list[tuple[int, int, int]]:
        """The lineup: (hero, soldier type, equipment choice) of each of its K teams, in slot order."""
        h = self.num_heroes
        heroes = np.asarray(genome[: self.lineup_size], dtype=np.int64)
        return [(int(hero), int(genome[h + hero]), int(genome[2 * h + hero])) for hero in heroes]

    def keys(self, genomes: np.ndarray) -> np.ndarray:
        """One row per genome that is equal exactly when two genomes field the same teams (slot
        order and the loadouts of heroes left out do not matter), [n, 3K]."""
        rows = [sorted(self.decode(genome)) for genome in np.asarray(genomes)]
        return np.asarray(rows, dtype=float).reshape(len(rows), -1)


def lineup_crossover(coding: LineupCoding, parents_a: np.ndarray, parents_b: np.ndarray, rng: np.random.Generator,
                     probability: float = 0.9) -> tuple[np.ndarray, np.ndarray]:
    """Order crossover on the hero orderings and uniform crossover on the loadouts, per pair."""
    h = coding.num_heroes
    order_a, order_b = order_crossover(parents_a[:, :h], parents_b[:, :h], rng, probability)
    loadout_a, loadout_b = uniform_crossover(parents_a[:, h:], parents_b[:, h:], rng, probability)
    return np.concatenate([order_a, loadout_a], axis=1), np.concatenate([order_b, loadout_b], axis=1)


def lineup_mutation(coding: LineupCoding, genomes: np.ndarray, rng: np.random.Generator,
                    swap_probability: float = 0.7) -> np.ndarray:
    """Each genome, with `swap_probability`, exchanges a lineup slot with another position (a hero
    joins the lineup, or two lineup heroes trade slots); otherwise one hero of the lineup gets a
    new soldier type or equipment."""
    mutated = np.asarray(genomes, float).copy()
    n = len(mutated)
    h, k = coding.num_heroes, coding.lineup_size
    swap = rng.random(n) < swap_probability
    slots, others = rng.integers(0, k, size=n), rng.integers(0, h, size=n)
    rows = np.flatnonzero(swap)
    mutated[rows, slots[rows]], mutated[rows, others[rows]] = mutated[rows, others[rows]], mutated[rows, slots[rows]]
    for row in np.flatnonzero(~swap):
        hero = int(mutated[row, rng.integers(0, k)])
        if rng.random() < 0.5:
            mutated[row, h + hero] = rng.integers(0, coding.num_soldiers)
        else:
            mutated[row, 2 * h + hero] = rng.integers(0, coding.equipment_choices[hero])
    return mutated


def lineup_operators(coding: LineupCoding, crossover_probability: float = 0.9) -> dict[str, Any]:
    """The keyword arguments that make `ec.NSGA2` search lineups: a random valid population, then
    `lineup_crossover` and `lineup_mutation`; a child that fields the same teams as a member or an
    earlier child (`LineupCoding.keys`) is a duplicate and swaps a lineup slot again."""
    return {"sampling": coding.sample, "crossover": partial(lineup_crossover, coding, probability=crossover_probability),
            "mutation": partial(lineup_mutation, coding), "duplicate_key": coding.keys,
            "duplicate_mutation": partial(lineup_mutation, coding, swap_probability=1.0)}
