"""Uniform crossover: each variable comes from either parent by a coin flip. Any coding whose
variables are independent (real, integer, binary) stays valid, since children only hold values
their parents had at the same position."""

from __future__ import annotations

import numpy as np


def uniform_crossover(parents_a: np.ndarray, parents_b: np.ndarray, rng: np.random.Generator,
                      probability: float = 0.9, swap_probability: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """Two children per pair, [n, d] each; a pair is crossed with `probability`, and then each
    variable is exchanged with `swap_probability`."""
    a, b = np.asarray(parents_a, float), np.asarray(parents_b, float)
    n, d = a.shape
    swap = (rng.random((n, 1)) < probability) & (rng.random((n, d)) < swap_probability)
    return np.where(swap, b, a), np.where(swap, a, b)
