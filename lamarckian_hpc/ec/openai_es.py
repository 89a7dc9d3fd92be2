"""OpenAI-style evolution strategy (Salimans et al. 2017) as ask/tell: antithetic Gaussian
perturbations of one mean, centred-rank fitness shaping, Adam on the estimated gradient.
It minimises; `ask` returns the perturbed genomes, `tell` their objectives.

It gives the population interface of `ec.ask_tell` like every generational algorithm: each told
generation is numbered by an IdCounter and is the current `population`; its members have no
individual parents (they are samples around the mean, which all of them moved), so their parent
ids are -1. Its state is the mean, Adam's moments, the step count and the generator, all arrays
and numbers."""

from __future__ import annotations

import numpy as np

from .ask_tell import population_from_state, population_state
from .population import IdCounter, Population, PopulationView, best_of, orphans


def centered_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks scaled to [-0.5, 0.5]: robust to the objectives' scale and outliers."""
    ranks = np.empty(len(values))
    ranks[np.argsort(values, kind="stable")] = np.arange(len(values))
    return ranks / max(1, len(values) - 1) - 0.5


class OpenAIES(PopulationView):
    def __init__(self, mean: np.ndarray, sigma: float, population_size: int, rng: np.random.Generator,
                 learning_rate: float = 0.05, beta1: float = 0.9, beta2: float = 0.999,
                 lower: np.ndarray | None = None, upper: np.ndarray | None = None) -> None:
        """`lower` and `upper`, when given, bound the genomes asked for (clipped; the gradient is
        still estimated from the unclipped perturbations) and the mean."""
        if population_size < 2 or population_size % 2:
            raise ValueError(f"population_size must be an even number >= 2 (antithetic pairs), got {population_size}")
        self.mean = np.asarray(mean, float).copy()
        self.sigma, self.population_size, self.rng = sigma, population_size, rng
        self.learning_rate, self.beta1, self.beta2 = learning_rate, beta1, beta2
        self.lower = None if lower is None else np.asarray(lower, float)
        self.upper = None if upper is None else np.asarray(upper, float)
        self._m = np.zeros_like(self.mean)
        self._v = np.zeros_like(self.mean)
        self._t = 0
        self._noise: np.ndarray | None = None
        self.population: Population | None = None  # the last told generation
        self.counter = IdCounter()
        self.told_ids: np.ndarray | None = None
        self.told_parent_ids: np.ndarray | None = None
        self.told_objectives: np.ndarray | None = None

    @property
    def asked_parent_ids(self) -> np.ndarray | None:
        """Always -1: offspring are perturbations of the mean, not children of members."""
        return None if self._noise is None else orphans(len(self._noise))

    def _bounded(self, genomes: np.ndarray) -> np.ndarray:
        if self.lower is None and self.upper is None:
            return genomes
        return np.clip(genomes, self.lower, self.upper)

    def ask(self) -> np.ndarray:
        half = self.rng.standard_normal((self.population_size // 2, len(self.mean)))
        self._noise = np.concatenate([half, -half])
        return self._bounded(self.mean + self.sigma * self._noise)

    def tell(self, genomes: np.ndarray, objectives: np.ndarray) -> None:
        assert self._noise is not None, "tell before ask"
        objectives = np.asarray(objectives, float).reshape(len(genomes), -1)
        if objectives.shape[1] != 1:
            raise ValueError(f"the ES is single-objective; got {objectives.shape[1]} objectives per genome")
        told = Population(np.asarray(genomes, float), objectives, self.counter.take(len(genomes)),
                          orphans(len(genomes)))
        self.population, self.told_ids, self.told_parent_ids = told, told.ids, told.parent_ids
        self.told_objectives = told.objectives
        weights = centered_ranks(objectives[:, 0])
        gradient = weights @ self._noise / (self.population_size * self.sigma)  # of the objective: descend it
        self._t += 1
        self._m = self.beta1 * self._m + (1 - self.beta1) * gradient
        self._v = self.beta2 * self._v + (1 - self.beta2) * gradient**2
        m_hat = self._m / (1 - self.beta1**self._t)
        v_hat = self._v / (1 - self.beta2**self._t)
        self.mean = self._bounded(self.mean - self.learning_rate * m_hat / (np.sqrt(v_hat) + 1e-8))
        self._noise = None

    @property
    def best(self) -> tuple[np.ndarray, float]:
        """The best genome of the last told generation and its objective."""
        return best_of(self.population)

    def state_dict(self) -> dict:
        """The mean, Adam's moments and step, the next id, the generator and the last told
        generation, as arrays and numbers (between a tell and the next ask)."""
        return {"mean": self.mean.copy(), "adam_m": self._m.copy(), "adam_v": self._v.copy(), "adam_step": self._t,
                "next_id": self.counter.next_id, "rng": self.rng.bit_generator.state,
                "population": population_state(self.population)}

    def load_state_dict(self, state: dict) -> None:
        """Continue as the ES whose `state_dict()` this is (same sigma, size and learning rate)."""
        self.mean = np.asarray(state["mean"], float).copy()
        self._m = np.asarray(state["adam_m"], float).copy()
        self._v = np.asarray(state["adam_v"], float).copy()
        self._t = int(state["adam_step"])
        self.counter.next_id = int(state["next_id"])
        self.rng.bit_generator.state = state["rng"]
        self.population = population_from_state(state["population"])
        self._noise = None
