"""Simulated binary crossover (Deb and Agrawal 1995) on real-coded genomes, as a pure array function."""

from __future__ import annotations

import numpy as np


def sbx(parents_a: np.ndarray, parents_b: np.ndarray, lower: np.ndarray, upper: np.ndarray,
        rng: np.random.Generator, eta: float = 15.0, probability: float = 0.9,
        variable_probability: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """Two children per pair of parents, [n, d] each, within [lower, upper] (bounded SBX)."""
    a, b = parents_a.astype(float).copy(), parents_b.astype(float).copy()
    n, d = a.shape
    crossed = (rng.random((n, 1)) < probability) & (rng.random((n, d)) < variable_probability)
    crossed &= np.abs(a - b) > 1e-14
    y1, y2 = np.minimum(a, b), np.maximum(a, b)
    spread = np.where(crossed, y2 - y1, 1.0)
    u = rng.random((n, d))

    def child(distance_to_bound: np.ndarray) -> np.ndarray:
        beta = 1.0 + 2.0 * distance_to_bound / spread
        alpha = 2.0 - np.power(beta, -(eta + 1.0))
        beta_q = np.where(u <= 1.0 / alpha, np.power(u * alpha, 1.0 / (eta + 1.0)),
                          np.power(1.0 / np.maximum(2.0 - u * alpha, 1e-300), 1.0 / (eta + 1.0)))
        return beta_q

    beta_low = child(y1 - lower)
    beta_high = child(upper - y2)
    c1 = 0.5 * ((y1 + y2) - beta_low * (y2 - y1))
    c2 = 0.5 * ((y1 + y2) + beta_high * (y2 - y1))
    c1, c2 = np.clip(c1, lower, upper), np.clip(c2, lower, upper)
    swap = rng.random((n, d)) < 0.5
    c1, c2 = np.where(swap, c2, c1), np.where(swap, c1, c2)
    children_a = np.where(crossed, c1, a)
    children_b = np.where(crossed, c2, b)
    return children_a, children_b
