"""Named variation operators bound to a coding: which crossover and mutation fit which coding,
the defaults for each, and factories that bind bounds and parameters so that an algorithm only
sees `crossover(a, b, rng)` and `mutation(genomes, rng)`. The config refers to operators by
these names; nothing is looked up from a dotted path."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from .coding import Coding
from .operators import (
    bit_flip_mutation,
    integer_polynomial_mutation,
    integer_sbx,
    inversion_mutation,
    one_point_crossover,
    order_crossover,
    polynomial_mutation,
    sbx,
    swap_mutation,
    uniform_crossover,
)

Crossover = Callable[[np.ndarray, np.ndarray, np.random.Generator], tuple[np.ndarray, np.ndarray]]
Mutation = Callable[[np.ndarray, np.random.Generator], np.ndarray]

CROSSOVER_CODINGS: dict[str, tuple[str, ...]] = {
    "sbx": ("real", "integer"),
    "uniform": ("real", "integer", "binary"),
    "one_point": ("real", "integer", "binary"),
    "order": ("permutation",),
}
MUTATION_CODINGS: dict[str, tuple[str, ...]] = {
    "polynomial": ("real", "integer"),
    "bit_flip": ("binary",),
    "swap": ("permutation",),
    "inversion": ("permutation",),
}
DEFAULT_CROSSOVER = {"real": "sbx", "integer": "sbx", "binary": "uniform", "permutation": "order"}
DEFAULT_MUTATION = {"real": "polynomial", "integer": "polynomial", "binary": "bit_flip", "permutation": "inversion"}


def _check(kind: str, name: str, table: dict[str, tuple[str, ...]], coding: Coding) -> None:
    if name not in table:
        raise ValueError(f"unknown {kind} {name!r}; choose from {', '.join(table)}")
    if coding.kind not in table[name]:
        fitting = [other for other, kinds in table.items() if coding.kind in kinds]
        raise ValueError(f"{kind} {name!r} does not fit a {coding.kind} coding; use one of {', '.join(fitting)}")


def _bounded_crossover(function: Callable[..., tuple[np.ndarray, np.ndarray]], coding: Coding, eta: float,
                       probability: float, a: np.ndarray, b: np.ndarray,
                       rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    return function(a, b, coding.lower, coding.upper, rng, eta, probability)


def _free_crossover(function: Callable[..., tuple[np.ndarray, np.ndarray]], probability: float, a: np.ndarray,
                    b: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    return function(a, b, rng, probability)


def _bounded_mutation(function: Callable[..., np.ndarray], coding: Coding, eta: float, probability: float | None,
                      genomes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return function(genomes, coding.lower, coding.upper, rng, eta, probability)


def _free_mutation(function: Callable[..., np.ndarray], probability: float | None, genomes: np.ndarray,
                   rng: np.random.Generator) -> np.ndarray:
    return function(genomes, rng, probability)


def make_crossover(name: str | None, coding: Coding, probability: float = 0.9, eta: float = 15.0) -> Crossover:
    """The crossover `name` (default: the coding's) bound to the coding's bounds; a picklable callable."""
    name = name or DEFAULT_CROSSOVER[coding.kind]
    _check("crossover", name, CROSSOVER_CODINGS, coding)
    if name == "sbx":
        return partial(_bounded_crossover, integer_sbx if coding.kind == "integer" else sbx, coding, eta, probability)
    functions = {"uniform": uniform_crossover, "one_point": one_point_crossover, "order": order_crossover}
    return partial(_free_crossover, functions[name], probability)


def make_mutation(name: str | None, coding: Coding, eta: float = 20.0, probability: float | None = None) -> Mutation:
    """The mutation `name` (default: the coding's) bound to the coding's bounds; a picklable callable.
    `probability` is per variable for real, integer and binary codings (default 1/d) and per genome
    for permutations (default 1)."""
    name = name or DEFAULT_MUTATION[coding.kind]
    _check("mutation", name, MUTATION_CODINGS, coding)
    if name == "polynomial":
        operator = integer_polynomial_mutation if coding.kind == "integer" else polynomial_mutation
        return partial(_bounded_mutation, operator, coding, eta, probability)
    if name == "bit_flip":
        return partial(_free_mutation, bit_flip_mutation, probability)
    permute = swap_mutation if name == "swap" else inversion_mutation
    return partial(_free_mutation, permute, 1.0 if probability is None else probability)
