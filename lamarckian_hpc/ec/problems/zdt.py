"""ZDT test problems (Zitzler, Deb, Thiele 2000), vectorized: two objectives, minimised. Default
sizes are the paper's: 30 variables for ZDT1-3, 10 for ZDT4 and ZDT6."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .problem import Problem


def _zdt_g(X: np.ndarray) -> np.ndarray:
    return 1.0 + 9.0 / (X.shape[1] - 1) * X[:, 1:].sum(axis=1)


def _zdt1(X: np.ndarray) -> np.ndarray:
    f1, g = X[:, 0], _zdt_g(X)
    return np.column_stack([f1, g * (1.0 - np.sqrt(f1 / g))])


def _zdt2(X: np.ndarray) -> np.ndarray:
    f1, g = X[:, 0], _zdt_g(X)
    return np.column_stack([f1, g * (1.0 - (f1 / g) ** 2)])


def _zdt3(X: np.ndarray) -> np.ndarray:
    f1, g = X[:, 0], _zdt_g(X)
    return np.column_stack([f1, g * (1.0 - np.sqrt(f1 / g) - f1 / g * np.sin(10.0 * np.pi * f1))])


def _zdt4(X: np.ndarray) -> np.ndarray:
    """Many local fronts: a Rastrigin-like g over x2..xn in [-5, 5]."""
    f1, rest = X[:, 0], X[:, 1:]
    g = 1.0 + 10.0 * rest.shape[1] + (rest**2 - 10.0 * np.cos(4.0 * np.pi * rest)).sum(axis=1)
    return np.column_stack([f1, g * (1.0 - np.sqrt(f1 / g))])


def _zdt6(X: np.ndarray) -> np.ndarray:
    """Non-uniform density along a non-convex front."""
    f1 = 1.0 - np.exp(-4.0 * X[:, 0]) * np.sin(6.0 * np.pi * X[:, 0]) ** 6
    g = 1.0 + 9.0 * (X[:, 1:].sum(axis=1) / (X.shape[1] - 1)) ** 0.25
    return np.column_stack([f1, g * (1.0 - (f1 / g) ** 2)])


_FUNCTIONS: dict[int, Callable[[np.ndarray], np.ndarray]] = {1: _zdt1, 2: _zdt2, 3: _zdt3, 4: _zdt4, 6: _zdt6}
DEFAULT_VARIABLES = {1: 30, 2: 30, 3: 30, 4: 10, 6: 10}


def zdt(number: int, num_variables: int | None = None) -> Problem:
    """ZDT1, 2, 3, 4 or 6 (ZDT5 is binary-coded and not provided)."""
    if number not in _FUNCTIONS:
        raise ValueError(f"ZDT{number} is not available; choose from {sorted(_FUNCTIONS)}")
    d = num_variables or DEFAULT_VARIABLES[number]
    if d < 2:
        raise ValueError(f"ZDT{number} needs at least 2 variables, got {d}")
    lower, upper = np.zeros(d), np.ones(d)
    if number == 4:
        lower[1:], upper[1:] = -5.0, 5.0
    return Problem(f"ZDT{number}", d, 2, lower, upper, _FUNCTIONS[number])
