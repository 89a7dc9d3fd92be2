"""Parent selection as index arrays: k-way tournament on one minimised fitness, and NSGA-II's
crowded comparison (lower front rank wins, then larger crowding distance) as a binary tournament."""

from __future__ import annotations

import numpy as np


def tournament(fitness: np.ndarray, count: int, rng: np.random.Generator, size: int = 2) -> np.ndarray:
    """Indices of `count` winners; each tournament draws `size` members with replacement and the
    lowest fitness wins (the first drawn on ties)."""
    fitness = np.asarray(fitness, float).reshape(-1)
    candidates = rng.integers(0, len(fitness), size=(count, size))
    return candidates[np.arange(count), np.argmin(fitness[candidates], axis=1)]


def crowded_comparison(rank: np.ndarray, crowding: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Whether each member a beats b: a lower front rank, or the same rank and more crowding distance."""
    return (rank[a] < rank[b]) | ((rank[a] == rank[b]) & (crowding[a] > crowding[b]))


def crowded_tournament(rank: np.ndarray, crowding: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of `count` binary-tournament winners under the crowded comparison (ranks and
    crowding from `ec.ranking.rank_and_crowding`)."""
    a, b = rng.integers(0, len(rank), size=(2, count))
    return np.where(crowded_comparison(rank, crowding, a, b), a, b)
