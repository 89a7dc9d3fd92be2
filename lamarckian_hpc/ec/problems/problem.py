"""A numeric test problem: a vectorized objective function with its bounds and coding. It is an
Evaluator (`ec.evaluator`), so the evolution driver runs it exactly as it will run RL learners."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..coding import Coding, CodingKind
from ..evaluator import Description


@dataclass(frozen=True)
class Problem:
    name: str
    num_variables: int
    num_objectives: int
    lower: np.ndarray
    upper: np.ndarray
    evaluate: Callable[[np.ndarray], np.ndarray]  # decisions [n, d] -> objectives [n, m], minimised
    coding_kind: CodingKind = "real"
    optimum: float | None = None  # best objective value of a single-objective problem, when known

    @property
    def coding(self) -> Coding:
        return Coding(self.coding_kind, np.asarray(self.lower, float), np.asarray(self.upper, float))

    def describe(self) -> Description:
        return Description(self.name, self.coding, self.num_objectives)

    def initialize(self, rng: np.random.Generator, count: int) -> np.ndarray:
        return self.coding.sample(rng, count)
