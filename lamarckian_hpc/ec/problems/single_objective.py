"""Single-objective test problems for the GA, one per coding: sphere and Rastrigin (real),
OneMax (binary) and a travelling-salesman tour (permutation). Each knows its optimum, so tests
and runs can say how close they came."""

from __future__ import annotations

from functools import partial

import numpy as np

from .problem import Problem


def _sphere(X: np.ndarray) -> np.ndarray:
    return (X**2).sum(axis=1, keepdims=True)


def _rastrigin(X: np.ndarray) -> np.ndarray:
    return (10.0 * X.shape[1] + (X**2 - 10.0 * np.cos(2.0 * np.pi * X)).sum(axis=1))[:, None]


def _zeros(X: np.ndarray) -> np.ndarray:
    """OneMax as a minimisation: the number of bits still 0."""
    return (X.shape[1] - X.sum(axis=1))[:, None]


def _tour_length(cities: np.ndarray, X: np.ndarray) -> np.ndarray:
    order = np.asarray(X, dtype=np.int64)
    points = cities[order]  # [n, num_cities, 2]
    steps = points - np.roll(points, -1, axis=1)
    return np.sqrt((steps**2).sum(axis=2)).sum(axis=1, keepdims=True)


def sphere(num_variables: int = 10) -> Problem:
    """sum x_i^2 over [-5.12, 5.12]^d; optimum 0 at the origin."""
    return Problem("sphere", num_variables, 1, np.full(num_variables, -5.12), np.full(num_variables, 5.12), _sphere,
                   optimum=0.0)


def rastrigin(num_variables: int = 10) -> Problem:
    """10 d + sum (x_i^2 - 10 cos 2 pi x_i) over [-5.12, 5.12]^d: a sphere under a grid of local
    minima; optimum 0 at the origin."""
    return Problem("rastrigin", num_variables, 1, np.full(num_variables, -5.12), np.full(num_variables, 5.12),
                   _rastrigin, optimum=0.0)


def onemax(num_variables: int = 50) -> Problem:
    """Bit strings scored by their zeros; optimum 0 (all ones)."""
    return Problem("onemax", num_variables, 1, np.zeros(num_variables), np.ones(num_variables), _zeros,
                   coding_kind="binary", optimum=0.0)


def circle_cities(num_cities: int, seed: int = 0) -> np.ndarray:
    """Cities evenly spaced on the unit circle, listed in a shuffled order: the shortest tour is the
    polygon, of length 2 n sin(pi / n), but no genome starts out knowing it."""
    angles = 2.0 * np.pi * np.arange(num_cities) / num_cities
    angles = angles[np.random.default_rng(seed).permutation(num_cities)]
    return np.column_stack([np.cos(angles), np.sin(angles)])


def tsp(num_cities: int = 20, seed: int = 0, cities: np.ndarray | None = None) -> Problem:
    """Closed tour over `cities` [n, 2] (default: `circle_cities`, whose optimum is known); a genome
    is a permutation of the city indices."""
    known = cities is None
    points = circle_cities(num_cities, seed) if cities is None else np.asarray(cities, float)
    n = len(points)
    return Problem("tsp", n, 1, np.zeros(n), np.full(n, float(n - 1)), partial(_tour_length, points),
                   coding_kind="permutation", optimum=2.0 * n * np.sin(np.pi / n) if known else None)
