"""Bit-flip mutation for binary genomes (0/1 floats): each bit flips with a small probability."""

from __future__ import annotations

import numpy as np


def bit_flip_mutation(genomes: np.ndarray, rng: np.random.Generator,
                      variable_probability: float | None = None) -> np.ndarray:
    """Flips each bit with probability 1/d by default; the result is still 0/1."""
    bits = np.asarray(genomes, float)
    probability = 1.0 / bits.shape[1] if variable_probability is None else variable_probability
    flip = rng.random(bits.shape) < probability
    return np.where(flip, 1.0 - bits, bits)
