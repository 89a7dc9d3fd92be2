"""Permutation-preserving mutations: swap two positions, or reverse a slice (inversion, the
2-opt move on tours). Both only reorder a genome, so a permutation stays a permutation."""

from __future__ import annotations

import numpy as np


def swap_mutation(genomes: np.ndarray, rng: np.random.Generator, probability: float = 1.0) -> np.ndarray:
    """Each genome, with `probability`, exchanges the elements at two random positions."""
    mutated = np.asarray(genomes, float).copy()
    n, d = mutated.shape
    rows = np.flatnonzero(rng.random(n) < probability)
    first, second = rng.integers(0, d, size=(2, len(rows)))
    mutated[rows, first], mutated[rows, second] = mutated[rows, second], mutated[rows, first]
    return mutated


def inversion_mutation(genomes: np.ndarray, rng: np.random.Generator, probability: float = 1.0) -> np.ndarray:
    """Each genome, with `probability`, reverses the slice between two random cut points."""
    mutated = np.asarray(genomes, float).copy()
    n, d = mutated.shape
    mutate = rng.random(n) < probability
    cuts = np.sort(rng.integers(0, d + 1, size=(n, 2)), axis=1)
    for row in np.flatnonzero(mutate):
        start, stop = cuts[row]
        mutated[row, start:stop] = mutated[row, start:stop][::-1]
    return mutated
