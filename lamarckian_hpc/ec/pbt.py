"""Population Based Training (Jaderberg et al. 2017) as ask/tell over hyperparameter arrays.

PBT never trains anything itself: `ask` gives the hyperparameters of every slot of the
population, the runtime trains each slot for one interval, and `tell` takes the interval's scores
and answers which slots must copy the weights of which others (exploit), after which `ask` gives
the explored hyperparameters. So the same object drives learners in this process, on Ray actors
or inside a unit test, and it imports neither torch nor Ray.

Every member has an id; a slot that copies another gets a new id whose parent is the copied
member's id, so the lineage of every policy can be rebuilt from the ids the runtime records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from .population import NO_PARENT, IdCounter, Population

Exploit = Literal["truncation", "ttest", "none"]
Explore = Literal["perturb", "resample"]


@dataclass(frozen=True)
class Hyperparameter:
    """One searched hyperparameter: its interval [low, high] and whether it lives on a log scale.

    `initial_low`/`initial_high` narrow where the first population is drawn from (default: the
    whole interval); exploration always stays inside [low, high].
    """

    name: str
    low: float
    high: float
    log: bool = False
    initial_low: float | None = None
    initial_high: float | None = None

    def __post_init__(self) -> None:
        if not self.low < self.high:
            raise ValueError(f"{self.name}: low ({self.low}) must be below high ({self.high})")
        if self.log and self.low <= 0:
            raise ValueError(f"{self.name}: a log-scale interval needs low > 0, got {self.low}")
        first_low, first_high = self.initial_interval
        if not self.low <= first_low <= first_high <= self.high:
            raise ValueError(f"{self.name}: initial interval [{first_low}, {first_high}] must lie in "
                             f"[{self.low}, {self.high}]")

    @property
    def initial_interval(self) -> tuple[float, float]:
        low = self.low if self.initial_low is None else self.initial_low
        high = self.high if self.initial_high is None else self.initial_high
        return low, high

    def sample(self, rng: np.random.Generator, count: int, low: float | None = None,
               high: float | None = None) -> np.ndarray:
        """`count` values uniform in [low, high] (log-uniform on a log scale)."""
        low = self.low if low is None else low
        high = self.high if high is None else high
        if self.log:
            return np.exp(rng.uniform(np.log(low), np.log(high), count))
        return rng.uniform(low, high, count)


def bounds_of(space: Sequence[Hyperparameter]) -> tuple[np.ndarray, np.ndarray]:
    return np.array([h.low for h in space], float), np.array([h.high for h in space], float)


def truncation_sources(scores: np.ndarray, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """Exploit by truncation: each of the bottom `fraction` of slots copies a uniformly chosen slot
    of the top `fraction`. Returns, per slot, the slot to copy or -1 to keep its own weights.
    A NaN score (no episode finished) ranks below every number."""
    size = len(scores)
    count = min(int(np.floor(fraction * size)), size // 2)
    sources = np.full(size, -1)
    if count < 1:
        return sources
    ranking = np.argsort(np.where(np.isnan(scores), -np.inf, scores), kind="stable")  # worst first
    bottom, top = ranking[:count], ranking[size - count:]
    sources[bottom] = rng.choice(top, size=count)
    return sources


def _welch_pvalue(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided p-value of Welch's t-test. scipy.stats is imported here, not at the top: it takes
    over a second to import, and only the t-test exploit needs it."""
    from scipy import stats

    return float(stats.ttest_ind(a, b, equal_var=False).pvalue)


def ttest_sources(samples: Sequence[np.ndarray], alpha: float, rng: np.random.Generator) -> np.ndarray:
    """Exploit by Welch's t-test: each slot compares its recent scores with those of one other slot
    drawn uniformly; it copies that slot when its mean is higher and Welch's t-test (unequal
    variances) finds the difference significant at `alpha`. Fewer than two samples never copy."""
    size = len(samples)
    sources = np.full(size, -1)
    if size < 2:
        return sources
    for slot in range(size):
        other = int(rng.choice([s for s in range(size) if s != slot]))
        mine, theirs = np.asarray(samples[slot], float), np.asarray(samples[other], float)
        if len(mine) < 2 or len(theirs) < 2 or theirs.mean() <= mine.mean():
            continue
        if np.ptp(mine) == 0 and np.ptp(theirs) == 0:
            sources[slot] = other  # both constant and different: the difference is certain
            continue
        if _welch_pvalue(theirs, mine) < alpha:
            sources[slot] = other
    return sources


def perturb(values: np.ndarray, space: Sequence[Hyperparameter], factors: tuple[float, float],
            rng: np.random.Generator) -> np.ndarray:
    """Explore by perturbation: every hyperparameter is multiplied by one of `factors` (chosen
    uniformly and independently), then clipped to its interval. Multiplying is a step of fixed
    size on a log scale, and a proportional step on a linear one."""
    low, high = bounds_of(space)
    chosen = np.asarray(factors, float)[rng.integers(0, len(factors), size=len(space))]
    return np.clip(np.asarray(values, float) * chosen, low, high)


def resample(space: Sequence[Hyperparameter], rng: np.random.Generator) -> np.ndarray:
    """Explore by resampling: fresh values from each whole interval (log-uniform where log)."""
    return np.array([h.sample(rng, 1)[0] for h in space])


class PBT:
    """Population state: per slot an id, a parent id, hyperparameters and the scores since the slot
    last changed weights. `resample_probability` makes perturbation resample each hyperparameter
    with that chance instead (Ray Tune's behaviour); explore="resample" always resamples."""

    def __init__(self, space: Sequence[Hyperparameter], population_size: int, rng: np.random.Generator,
                 exploit: Exploit = "truncation", explore: Explore = "perturb", truncation_fraction: float = 0.25,
                 perturb_factors: tuple[float, float] = (0.8, 1.2), resample_probability: float = 0.0,
                 ttest_alpha: float = 0.05, ttest_window: int = 20) -> None:
        if population_size < 1:
            raise ValueError(f"population_size must be >= 1, got {population_size}")
        if not space:
            raise ValueError("PBT needs at least one hyperparameter")
        self.space = tuple(space)
        self.names = tuple(h.name for h in self.space)
        self.population_size, self.rng = population_size, rng
        self.exploit, self.explore = exploit, explore
        self.truncation_fraction, self.perturb_factors = truncation_fraction, tuple(perturb_factors)
        self.resample_probability = resample_probability
        self.ttest_alpha, self.ttest_window = ttest_alpha, ttest_window
        self.id_counter = IdCounter()
        self.ids = self.id_counter.take(population_size)
        self.parent_ids = np.full(population_size, NO_PARENT, dtype=np.int64)
        columns = [h.sample(rng, population_size, *h.initial_interval) for h in self.space]
        self.hyperparameters = np.stack(columns, axis=1)  # [population_size, num_hyperparameters]
        self.scores: list[list[float]] = [[] for _ in range(population_size)]  # per slot, since its last copy
        self.last_scores = np.full(population_size, np.nan)

    def ask(self) -> np.ndarray:
        """Hyperparameters every slot trains its next interval with, [population_size, H]."""
        return self.hyperparameters.copy()

    def population(self) -> Population:
        """The members as every EC algorithm keeps them: genomes are the hyperparameters, the one
        objective is the last score negated (minimised), the second parent is always NO_PARENT."""
        parents = np.stack([self.parent_ids, np.full(self.population_size, NO_PARENT)], axis=1)
        return Population(self.hyperparameters.copy(), -self.last_scores[:, None], self.ids.copy(), parents)

    def state_dict(self) -> dict:
        """Everything `tell` and `ask` depend on, as arrays, lists and numbers (for a checkpoint)."""
        return {"ids": self.ids.copy(), "parent_ids": self.parent_ids.copy(), "next_id": self.id_counter.next_id,
                "hyperparameters": self.hyperparameters.copy(), "scores": [list(map(float, s)) for s in self.scores],
                "last_scores": self.last_scores.copy(), "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        """Continue as the PBT whose `state_dict()` this is (same search space and size)."""
        hyperparameters = np.asarray(state["hyperparameters"], float)
        if hyperparameters.shape != self.hyperparameters.shape:
            raise ValueError(f"a PBT state of shape {hyperparameters.shape} does not fit a population of "
                             f"{self.population_size} over {len(self.space)} hyperparameters")
        self.ids = np.asarray(state["ids"], np.int64).copy()
        self.parent_ids = np.asarray(state["parent_ids"], np.int64).copy()
        self.id_counter.next_id = int(state["next_id"])
        self.hyperparameters = hyperparameters.copy()
        self.scores = [list(map(float, s)) for s in state["scores"]]
        self.last_scores = np.asarray(state["last_scores"], float).copy()
        self.rng.bit_generator.state = state["rng"]

    def as_dicts(self) -> list[dict[str, float]]:
        return [dict(zip(self.names, map(float, row))) for row in self.hyperparameters]

    def tell(self, scores: np.ndarray, samples: Sequence[np.ndarray] | None = None) -> np.ndarray:
        """Record one interval's score per slot and run exploit and explore.

        `samples` (optional, per slot) are the raw observations behind each score, such as the
        returns of the interval's episodes; the t-test uses them, or else the interval scores.
        Returns per slot the slot whose weights it must copy now, or -1; `ids`, `parent_ids` and
        `ask()` already describe the population after the copies.
        """
        scores = np.asarray(scores, float)
        if scores.shape != (self.population_size,):
            raise ValueError(f"expected {self.population_size} scores, got shape {scores.shape}")
        self.last_scores = scores.copy()
        for slot, score in enumerate(scores):
            observed = [score] if samples is None else list(np.asarray(samples[slot], float).ravel())
            self.scores[slot] = (self.scores[slot] + [v for v in observed if not np.isnan(v)])[-self.ttest_window:]
        if self.exploit == "truncation":
            sources = truncation_sources(scores, self.truncation_fraction, self.rng)
        elif self.exploit == "ttest":
            sources = ttest_sources([np.array(s) for s in self.scores], self.ttest_alpha, self.rng)
        else:
            sources = np.full(self.population_size, -1)
        self._copy(sources)
        return sources

    def _copy(self, sources: np.ndarray) -> None:
        """Apply exploit (all at once, from the population before any copy) and explore."""
        before_ids, before_values = self.ids.copy(), self.hyperparameters.copy()
        for slot, source in enumerate(sources):
            if source < 0:
                continue
            self.parent_ids[slot] = before_ids[source]
            self.ids[slot] = self.id_counter.take(1)[0]
            self.hyperparameters[slot] = self._explored(before_values[source])
            self.scores[slot] = []  # new weights and hyperparameters: earlier scores no longer describe it
            self.last_scores[slot] = np.nan

    def _explored(self, values: np.ndarray) -> np.ndarray:
        if self.explore == "resample":
            return resample(self.space, self.rng)
        explored = perturb(values, self.space, self.perturb_factors, self.rng)
        if self.resample_probability > 0:
            fresh = resample(self.space, self.rng)
            chosen = self.rng.random(len(self.space)) < self.resample_probability
            explored = np.where(chosen, fresh, explored)
        return explored
