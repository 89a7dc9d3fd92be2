"""One-point crossover: children swap tails after a random cut, keeping runs of neighbouring
variables together (building blocks). Valid for real, integer and binary codings."""

from __future__ import annotations

import numpy as np


def one_point_crossover(parents_a: np.ndarray, parents_b: np.ndarray, rng: np.random.Generator,
                        probability: float = 0.9) -> tuple[np.ndarray, np.ndarray]:
    """Two children per pair, [n, d] each; a crossed pair exchanges variables cut..d-1, cut in 1..d-1."""
    a, b = np.asarray(parents_a, float), np.asarray(parents_b, float)
    n, d = a.shape
    if d < 2:
        return a.copy(), b.copy()
    cut = rng.integers(1, d, size=(n, 1))
    crossed = rng.random((n, 1)) < probability
    tail = crossed & (np.arange(d)[None, :] >= cut)
    return np.where(tail, b, a), np.where(tail, a, b)
