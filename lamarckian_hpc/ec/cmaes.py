"""CMA-ES as ask/tell over arrays, through the `cma` package (kept there, not written here)."""

from __future__ import annotations

import cma
import numpy as np


class CMAES:
    """Minimises a single objective; `ask` returns [population_size, d], `tell` takes [population_size]."""

    def __init__(self, mean: np.ndarray, sigma: float, rng: np.random.Generator, population_size: int | None = None,
                 lower: np.ndarray | None = None, upper: np.ndarray | None = None) -> None:
        options: dict = {"seed": int(rng.integers(1, 2**31 - 1)), "verbose": -9}
        if population_size is not None:
            options["popsize"] = population_size
        if lower is not None and upper is not None:
            options["bounds"] = [list(np.asarray(lower, float)), list(np.asarray(upper, float))]
        self.strategy = cma.CMAEvolutionStrategy(np.asarray(mean, float), sigma, options)
        self._asked: list[np.ndarray] | None = None

    def ask(self) -> np.ndarray:
        self._asked = self.strategy.ask()
        return np.array(self._asked)

    def tell(self, genomes: np.ndarray, objectives: np.ndarray) -> None:
        self.strategy.tell([np.asarray(g, float) for g in genomes], np.asarray(objectives, float).ravel().tolist())

    @property
    def best(self) -> tuple[np.ndarray, float]:
        return np.asarray(self.strategy.result.xbest), float(self.strategy.result.fbest)
