"""Non-dominated sorting and crowding distance (Deb et al. 2002), for minimisation."""

from __future__ import annotations

import numpy as np


def non_dominated_fronts(objectives: np.ndarray) -> list[np.ndarray]:
    """Indices of each front, best first. objectives is [n, m]."""
    n = len(objectives)
    less_equal = (objectives[:, None, :] <= objectives[None, :, :]).all(axis=2)
    strictly_less = (objectives[:, None, :] < objectives[None, :, :]).any(axis=2)
    dominates = less_equal & strictly_less  # dominates[i, j]: i dominates j
    domination_count = dominates.sum(axis=0)
    fronts: list[np.ndarray] = []
    current = np.flatnonzero(domination_count == 0)
    remaining = domination_count.copy()
    assigned = np.zeros(n, dtype=bool)
    while len(current):
        fronts.append(current)
        assigned[current] = True
        remaining = remaining - dominates[current].sum(axis=0)
        current = np.flatnonzero((remaining == 0) & ~assigned)
    return fronts


def crowding_distance(objectives: np.ndarray) -> np.ndarray:
    """Crowding distance of each member of one front; boundary members get infinity."""
    n, m = objectives.shape
    if n <= 2:
        return np.full(n, np.inf)
    distance = np.zeros(n)
    for k in range(m):
        order = np.argsort(objectives[:, k], kind="stable")
        values = objectives[order, k]
        span = values[-1] - values[0]
        distance[order[0]] = distance[order[-1]] = np.inf
        if span > 0:
            distance[order[1:-1]] += (values[2:] - values[:-2]) / span
    return distance


def rank_and_crowding(objectives: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(front rank, crowding distance) of every member."""
    rank = np.empty(len(objectives), dtype=np.int64)
    crowding = np.empty(len(objectives))
    for index, front in enumerate(non_dominated_fronts(objectives)):
        rank[front] = index
        crowding[front] = crowding_distance(objectives[front])
    return rank, crowding
