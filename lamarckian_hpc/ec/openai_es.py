"""OpenAI-style evolution strategy (Salimans et al. 2017) as ask/tell: antithetic Gaussian
perturbations of one mean, centred-rank fitness shaping, Adam on the estimated gradient.
It minimises; `ask` returns the perturbed genomes, `tell` their objectives."""

from __future__ import annotations

import numpy as np


def centered_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks scaled to [-0.5, 0.5]: robust to the objectives' scale and outliers."""
    ranks = np.empty(len(values))
    ranks[np.argsort(values, kind="stable")] = np.arange(len(values))
    return ranks / max(1, len(values) - 1) - 0.5


class OpenAIES:
    def __init__(self, mean: np.ndarray, sigma: float, population_size: int, rng: np.random.Generator,
                 learning_rate: float = 0.05, beta1: float = 0.9, beta2: float = 0.999) -> None:
        if population_size < 2 or population_size % 2:
            raise ValueError(f"population_size must be an even number >= 2 (antithetic pairs), got {population_size}")
        self.mean = np.asarray(mean, float).copy()
        self.sigma, self.population_size, self.rng = sigma, population_size, rng
        self.learning_rate, self.beta1, self.beta2 = learning_rate, beta1, beta2
        self._m = np.zeros_like(self.mean)
        self._v = np.zeros_like(self.mean)
        self._t = 0
        self._noise: np.ndarray | None = None

    def ask(self) -> np.ndarray:
        half = self.rng.standard_normal((self.population_size // 2, len(self.mean)))
        self._noise = np.concatenate([half, -half])
        return self.mean + self.sigma * self._noise

    def tell(self, genomes: np.ndarray, objectives: np.ndarray) -> None:
        assert self._noise is not None, "tell before ask"
        weights = centered_ranks(np.asarray(objectives, float).ravel())
        gradient = weights @ self._noise / (self.population_size * self.sigma)  # of the objective: descend it
        self._t += 1
        self._m = self.beta1 * self._m + (1 - self.beta1) * gradient
        self._v = self.beta2 * self._v + (1 - self.beta2) * gradient**2
        m_hat = self._m / (1 - self.beta1**self._t)
        v_hat = self._v / (1 - self.beta2**self._t)
        self.mean = self.mean - self.learning_rate * m_hat / (np.sqrt(v_hat) + 1e-8)
