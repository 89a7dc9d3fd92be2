"""CMA-ES as ask/tell over arrays, through the `cma` package (kept there, not written here).

`cma` keeps its state in objects (samplers, step-size adaptation, boundary handlers, loggers)
that can be pickled but not written as plain data, and pickles are what a checkpoint must never
hold. So the state is the seed and every told generation (genomes and objectives): CMA-ES is a
deterministic function of them, and `load_state_dict` rebuilds the strategy from the seed and
replays the told generations (ask, then tell what was told), which restores it exactly. The
normal samples come from this object's own generator, not from numpy's global one that `cma`
seeds by default, so that nothing else in the process can change what a replay draws.

Like every generational algorithm it gives the population interface of `ec.ask_tell`: each told
generation is numbered by an IdCounter and is the current `population`; its members are samples
of the search distribution, not children of members, so their parent ids are -1."""

from __future__ import annotations

import cma
import numpy as np

from .population import IdCounter, Population, PopulationView, orphans


class _StandardNormal:
    """`randn(*shape)` as `cma` calls it, drawn from a seeded Generator (picklable)."""

    def __init__(self, seed: int) -> None:
        self.generator = np.random.default_rng(seed)

    def __call__(self, *shape: int) -> np.ndarray:
        return self.generator.standard_normal(shape)


class CMAES(PopulationView):
    """Minimises a single objective; `ask` returns [population_size, d], `tell` takes [population_size]
    or [population_size, 1]."""

    def __init__(self, mean: np.ndarray, sigma: float, rng: np.random.Generator, population_size: int | None = None,
                 lower: np.ndarray | None = None, upper: np.ndarray | None = None) -> None:
        self.initial_mean, self.sigma = np.asarray(mean, float).copy(), float(sigma)
        self.population_size_option = population_size
        self.lower = None if lower is None else np.asarray(lower, float)
        self.upper = None if upper is None else np.asarray(upper, float)
        self.seed = int(rng.integers(1, 2**31 - 1))
        self.strategy = self._new_strategy()
        self.counter = IdCounter()
        self.population: Population | None = None  # the last told generation
        self.told_ids: np.ndarray | None = None
        self.told_parent_ids: np.ndarray | None = None
        self.told_objectives: np.ndarray | None = None
        self._told_genomes: list[np.ndarray] = []
        self._told_values: list[np.ndarray] = []
        self._asked = 0

    def _new_strategy(self) -> cma.CMAEvolutionStrategy:
        options: dict = {"seed": float("nan"), "randn": _StandardNormal(self.seed), "verbose": -9,
                         "verb_log": 0, "verb_disp": 0}
        if self.population_size_option is not None:
            options["popsize"] = self.population_size_option
        if self.lower is not None and self.upper is not None:
            options["bounds"] = [list(self.lower), list(self.upper)]
        return cma.CMAEvolutionStrategy(self.initial_mean, self.sigma, options)

    @property
    def population_size(self) -> int:
        return int(self.strategy.popsize)

    @property
    def asked_parent_ids(self) -> np.ndarray | None:
        """Always -1: offspring are samples of the search distribution, not children of members."""
        return orphans(self._asked) if self._asked else None

    def ask(self) -> np.ndarray:
        genomes = np.array(self.strategy.ask())
        self._asked = len(genomes)
        return genomes

    def tell(self, genomes: np.ndarray, objectives: np.ndarray) -> None:
        genomes = np.asarray(genomes, float)
        objectives = np.asarray(objectives, float).reshape(len(genomes), -1)
        if objectives.shape[1] != 1:
            raise ValueError(f"CMA-ES is single-objective; got {objectives.shape[1]} objectives per genome")
        self.strategy.tell(list(genomes), objectives[:, 0].tolist())
        self._record(genomes, objectives)

    def _record(self, genomes: np.ndarray, objectives: np.ndarray) -> None:
        self._told_genomes.append(genomes.copy())
        self._told_values.append(objectives[:, 0].copy())
        told = Population(genomes.copy(), objectives.copy(), self.counter.take(len(genomes)), orphans(len(genomes)))
        self.population, self.told_ids, self.told_parent_ids = told, told.ids, told.parent_ids
        self.told_objectives = told.objectives
        self._asked = 0

    @property
    def best(self) -> tuple[np.ndarray, float]:
        return np.asarray(self.strategy.result.xbest), float(self.strategy.result.fbest)

    def state_dict(self) -> dict:
        """The seed, every told generation ([g, n, d] genomes and [g, n] objectives: CMA-ES's
        population size is fixed) and, as a check of the replay, the current mean and step size."""
        d, n = len(self.initial_mean), self.population_size
        return {"seed": self.seed, "next_id": self.counter.next_id,
                "told_genomes": np.array(self._told_genomes, float).reshape(len(self._told_genomes), n, d),
                "told_objectives": np.array(self._told_values, float).reshape(len(self._told_values), n),
                "mean": np.asarray(self.strategy.mean, float).copy(), "sigma": float(self.strategy.sigma)}

    def load_state_dict(self, state: dict) -> None:
        """Rebuild the strategy from the saved seed and replay the told generations (same initial
        mean, sigma, size and bounds as the saved CMA-ES); a replay that does not end where the
        saved strategy was (another `cma` version) is a ValueError rather than a silent change."""
        self.seed = int(state["seed"])
        self.strategy = self._new_strategy()
        self.counter = IdCounter()
        self._told_genomes, self._told_values = [], []
        self.population = self.told_ids = self.told_parent_ids = self.told_objectives = None
        for genomes, values in zip(np.asarray(state["told_genomes"], float), np.asarray(state["told_objectives"], float)):
            self.strategy.ask()
            self.strategy.tell(list(genomes), values.tolist())
            self._record(genomes, values[:, None])
        if self.counter.next_id != int(state["next_id"]) or not (
                np.array_equal(np.asarray(self.strategy.mean, float), np.asarray(state["mean"], float))
                and float(self.strategy.sigma) == float(state["sigma"])):
            raise ValueError("replaying the saved CMA-ES generations did not restore its mean and step size; "
                             "was it saved by another version of cma or with other settings?")
