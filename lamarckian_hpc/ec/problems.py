"""Multi-objective test problems, vectorized over a population: ZDT (Zitzler, Deb, Thiele 2000)
and DTLZ2 (Deb et al. 2005). `evaluate(X)` maps decisions [n, d] to objectives [n, m] (minimised)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class Problem:
    name: str
    num_variables: int
    num_objectives: int
    lower: np.ndarray
    upper: np.ndarray
    evaluate: Callable[[np.ndarray], np.ndarray]


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


def _dtlz2(num_objectives: int) -> Callable[[np.ndarray], np.ndarray]:
    def evaluate(X: np.ndarray) -> np.ndarray:
        k = num_objectives - 1
        g = ((X[:, k:] - 0.5) ** 2).sum(axis=1)
        angles = X[:, :k] * np.pi / 2.0
        F = np.empty((len(X), num_objectives))
        for i in range(num_objectives):
            value = 1.0 + g
            value = value * np.prod(np.cos(angles[:, : k - i]), axis=1)
            if i > 0:
                value = value * np.sin(angles[:, k - i])
            F[:, i] = value
        return F
    return evaluate


def zdt(number: int, num_variables: int = 30) -> Problem:
    functions = {1: _zdt1, 2: _zdt2, 3: _zdt3}
    if number not in functions:
        raise ValueError(f"ZDT{number} is not available; choose from {sorted(functions)}")
    return Problem(f"ZDT{number}", num_variables, 2, np.zeros(num_variables), np.ones(num_variables), functions[number])


def dtlz2(num_objectives: int = 3, num_variables: int = 12) -> Problem:
    return Problem("DTLZ2", num_variables, num_objectives, np.zeros(num_variables), np.ones(num_variables),
                   _dtlz2(num_objectives))
