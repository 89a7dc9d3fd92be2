"""Order crossover (OX, Davis 1985) for permutation genomes: a child keeps a slice of one parent
in place and takes the remaining elements in the order they follow the slice in the other
parent, so it is always a permutation and keeps relative orders (tour adjacencies) of both."""

from __future__ import annotations

import numpy as np


def _order_child(keep_from: np.ndarray, order_from: np.ndarray, start: int, stop: int) -> np.ndarray:
    d = len(keep_from)
    child = np.empty(d)
    child[start:stop] = keep_from[start:stop]
    kept = np.zeros(d, dtype=bool)
    kept[keep_from[start:stop].astype(np.int64)] = True
    rotated = np.roll(order_from, -stop)  # the other parent read from just after the slice, wrapping
    filler = rotated[~kept[rotated.astype(np.int64)]]
    free = np.roll(np.arange(d), -stop)[: d - (stop - start)]  # free positions from just after the slice
    child[free] = filler
    return child


def order_crossover(parents_a: np.ndarray, parents_b: np.ndarray, rng: np.random.Generator,
                    probability: float = 0.9) -> tuple[np.ndarray, np.ndarray]:
    """Two children per pair of permutations of 0..d-1, [n, d] each."""
    a, b = np.asarray(parents_a, float), np.asarray(parents_b, float)
    n, d = a.shape
    children_a, children_b = a.copy(), b.copy()
    crossed = rng.random(n) < probability
    cuts = np.sort(rng.integers(0, d + 1, size=(n, 2)), axis=1)
    for row in np.flatnonzero(crossed):
        start, stop = int(cuts[row, 0]), int(cuts[row, 1])
        if stop - start in (0, d):
            continue
        children_a[row] = _order_child(a[row], b[row], start, stop)
        children_b[row] = _order_child(b[row], a[row], start, stop)
    return children_a, children_b
