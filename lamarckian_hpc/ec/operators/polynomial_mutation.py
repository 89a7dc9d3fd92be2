"""Polynomial mutation (Deb and Goyal 1996) on real-coded genomes, as a pure array function."""

from __future__ import annotations

import numpy as np


def polynomial_mutation(genomes: np.ndarray, lower: np.ndarray, upper: np.ndarray, rng: np.random.Generator,
                        eta: float = 20.0, variable_probability: float | None = None) -> np.ndarray:
    """Each variable mutates with probability 1/d by default; results stay within [lower, upper]."""
    x = genomes.astype(float).copy()
    n, d = x.shape
    probability = 1.0 / d if variable_probability is None else variable_probability
    mutate = rng.random((n, d)) < probability
    span = upper - lower
    delta1, delta2 = (x - lower) / span, (upper - x) / span
    u = rng.random((n, d))
    power = 1.0 / (eta + 1.0)
    low_side = u < 0.5
    value_low = 2.0 * u + (1.0 - 2.0 * u) * np.power(1.0 - delta1, eta + 1.0)
    value_high = 2.0 * (1.0 - u) + 2.0 * (u - 0.5) * np.power(1.0 - delta2, eta + 1.0)
    delta_q = np.where(low_side, np.power(value_low, power) - 1.0, 1.0 - np.power(value_high, power))
    x = np.where(mutate, x + delta_q * span, x)
    return np.clip(x, lower, upper)
