"""DTLZ test problems (Deb, Thiele, Laumanns, Zitzler 2005), vectorized, for any number of
objectives M >= 2, minimised. Variables are in [0, 1]; the last k form the distance part, with
the paper's k = 5 for DTLZ1, 10 for DTLZ2-6 and 20 for DTLZ7 (so 7, 12 and 22 variables at M = 3)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .problem import Problem

DEFAULT_K = {1: 5, 2: 10, 3: 10, 4: 10, 5: 10, 6: 10, 7: 20}


def _g_multimodal(XM: np.ndarray) -> np.ndarray:
    """DTLZ1 and DTLZ3: 3^k - 1 local fronts."""
    return 100.0 * (XM.shape[1] + ((XM - 0.5) ** 2 - np.cos(20.0 * np.pi * (XM - 0.5))).sum(axis=1))


def _g_sphere(XM: np.ndarray) -> np.ndarray:
    return ((XM - 0.5) ** 2).sum(axis=1)


def _spherical(positions: np.ndarray, g: np.ndarray, num_objectives: int) -> np.ndarray:
    """(1 + g) times the cos/sin products of positions [n, M-1] in [0, 1] (angles pi/2 * position)."""
    angles = positions * np.pi / 2.0
    k = num_objectives - 1
    F = np.empty((len(positions), num_objectives))
    for i in range(num_objectives):
        value = (1.0 + g) * np.prod(np.cos(angles[:, : k - i]), axis=1)
        if i > 0:
            value = value * np.sin(angles[:, k - i])
        F[:, i] = value
    return F


def _linear(positions: np.ndarray, g: np.ndarray, num_objectives: int) -> np.ndarray:
    """DTLZ1's simplex front: 0.5 (1 + g) times products of positions."""
    k = num_objectives - 1
    F = np.empty((len(positions), num_objectives))
    for i in range(num_objectives):
        value = 0.5 * (1.0 + g) * np.prod(positions[:, : k - i], axis=1)
        if i > 0:
            value = value * (1.0 - positions[:, k - i])
        F[:, i] = value
    return F


def _degenerate(positions: np.ndarray, g: np.ndarray) -> np.ndarray:
    """DTLZ5 and DTLZ6: all but the first position pulled towards 1/2 as g -> 0 (a curve front)."""
    squeezed = (1.0 + 2.0 * g[:, None] * positions) / (2.0 * (1.0 + g[:, None]))
    return np.column_stack([positions[:, 0], squeezed[:, 1:]])


def _dtlz(number: int, M: int) -> Callable[[np.ndarray], np.ndarray]:
    def evaluate(X: np.ndarray) -> np.ndarray:
        positions, XM = X[:, : M - 1], X[:, M - 1:]
        if number == 1:
            return _linear(positions, _g_multimodal(XM), M)
        if number == 2:
            return _spherical(positions, _g_sphere(XM), M)
        if number == 3:
            return _spherical(positions, _g_multimodal(XM), M)
        if number == 4:
            return _spherical(positions**100.0, _g_sphere(XM), M)
        if number == 5:
            g = _g_sphere(XM)
            return _spherical(_degenerate(positions, g), g, M)
        if number == 6:
            g = (XM**0.1).sum(axis=1)
            return _spherical(_degenerate(positions, g), g, M)
        g = 1.0 + 9.0 / XM.shape[1] * XM.sum(axis=1)
        h = M - (positions / (1.0 + g[:, None]) * (1.0 + np.sin(3.0 * np.pi * positions))).sum(axis=1)
        return np.column_stack([positions, (1.0 + g) * h])
    return evaluate


def dtlz(number: int, num_objectives: int = 3, num_variables: int | None = None) -> Problem:
    """DTLZ1-7 with `num_objectives` objectives; variables default to M - 1 + the paper's k."""
    if number not in DEFAULT_K:
        raise ValueError(f"DTLZ{number} is not available; choose from {sorted(DEFAULT_K)}")
    if num_objectives < 2:
        raise ValueError(f"DTLZ needs at least 2 objectives, got {num_objectives}")
    d = num_variables or num_objectives - 1 + DEFAULT_K[number]
    if d < num_objectives:
        raise ValueError(f"DTLZ{number} with {num_objectives} objectives needs at least {num_objectives} variables, got {d}")
    return Problem(f"DTLZ{number}", d, num_objectives, np.zeros(d), np.ones(d), _dtlz(number, num_objectives))


def dtlz2(num_objectives: int = 3, num_variables: int = 12) -> Problem:
    return dtlz(2, num_objectives, num_variables)
