"""Integer-preserving SBX and polynomial mutation: the real operators run on bounds widened by
half a step on each side, so that after rounding every integer in [lower, upper] is as reachable
as its neighbours (the end values included), and the result is rounded back into bounds."""

from __future__ import annotations

import numpy as np

from .polynomial_mutation import polynomial_mutation
from .sbx import sbx

_HALF_STEP = 0.5 - 1e-9


def _widened(lower: np.ndarray, upper: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray(lower, float) - _HALF_STEP, np.asarray(upper, float) + _HALF_STEP


def _rounded(genomes: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    return np.clip(np.round(genomes), lower, upper)


def integer_sbx(parents_a: np.ndarray, parents_b: np.ndarray, lower: np.ndarray, upper: np.ndarray,
                rng: np.random.Generator, eta: float = 15.0, probability: float = 0.9) -> tuple[np.ndarray, np.ndarray]:
    """SBX on integer genomes; children are integers within [lower, upper]."""
    wide_lower, wide_upper = _widened(lower, upper)
    child_a, child_b = sbx(parents_a, parents_b, wide_lower, wide_upper, rng, eta, probability)
    return _rounded(child_a, lower, upper), _rounded(child_b, lower, upper)


def integer_polynomial_mutation(genomes: np.ndarray, lower: np.ndarray, upper: np.ndarray, rng: np.random.Generator,
                                eta: float = 20.0, variable_probability: float | None = None) -> np.ndarray:
    """Polynomial mutation on integer genomes; results are integers within [lower, upper]."""
    wide_lower, wide_upper = _widened(lower, upper)
    mutated = polynomial_mutation(genomes, wide_lower, wide_upper, rng, eta, variable_probability)
    return _rounded(mutated, lower, upper)
