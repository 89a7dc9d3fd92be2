"""The config of PBT runs of `lamarckian-hpc evolve`: PBT over a population of PPO learners.

A member is configured with the same env, model and PPO sections as `lamarckian-hpc train`, so a
member trains exactly like a single run; the `algorithm` section (`name: pbt`) says how the
population is evolved, and which PPO hyperparameters PBT searches over which intervals.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .base import RootSection, Section, StorageConfig
from .population import CoLocatedTrainingRuntimeConfig
from .train import EnvConfig, ModelConfig, PPOConfig

SearchedHyperparameter = Literal["learning_rate", "value_weight", "entropy_weight"]


class HyperparameterRange(Section):
    low: float = Field(..., ge=0, description="Smallest value PBT may give it.")
    high: float = Field(..., gt=0, description="Largest value PBT may give it.")
    log: bool = Field(False, description="Sample log-uniformly (needs low > 0).")
    initial_low: float | None = Field(None, ge=0, description="Lower end of the first draw; default low.")
    initial_high: float | None = Field(None, gt=0, description="Upper end of the first draw; default high.")

    @model_validator(mode="after")
    def _ordered(self) -> HyperparameterRange:
        if not self.low < self.high:
            raise ValueError(f"low ({self.low}) must be below high ({self.high})")
        if self.log and self.low <= 0:
            raise ValueError(f"log scale needs low > 0, got {self.low}")
        first_low = self.low if self.initial_low is None else self.initial_low
        first_high = self.high if self.initial_high is None else self.initial_high
        if not self.low <= first_low <= first_high <= self.high:
            raise ValueError(f"initial interval [{first_low}, {first_high}] must lie within [{self.low}, {self.high}]")
        return self


def _table_iii() -> dict[str, HyperparameterRange]:
    """The paper's Table III intervals for Vector Pong: learning rate (0, 0.1] and critic loss
    weight (0, 1]; open lower ends become small positive bounds. Table III fixes the entropy weight
    at 0.01; it is searched here on a log scale around that value."""
    return {
        "learning_rate": HyperparameterRange(low=1e-5, high=0.1, log=True),
        "value_weight": HyperparameterRange(low=0.01, high=1.0),
        "entropy_weight": HyperparameterRange(low=1e-4, high=0.1, log=True),
    }


class PBTAlgorithmConfig(Section):
    name: Literal["pbt"] = Field("pbt", description="EvoRL algorithm: pbt (population based training of PPO).")
    population_size: int = Field(4, ge=1, le=4096, description="PPO learners trained together.")
    interval_env_frames: int = Field(8192, ge=1, description="Env frames each member trains between exploits.")
    exploit: Literal["truncation", "ttest", "none"] = Field(
        "truncation", description="truncation: bottom fraction copies top; ttest: Welch's t-test; none: no copies.")
    explore: Literal["perturb", "resample"] = Field(
        "perturb", description="perturb: multiply by a perturb factor; resample: draw from the interval.")
    truncation_fraction: float = Field(0.25, gt=0, le=0.5, description="Share of members in the top and bottom.")
    perturb_factors: tuple[float, float] = Field((0.8, 1.2), description="Factors a perturbation multiplies by.")
    resample_probability: float = Field(0.25, ge=0, le=1, description="perturb: chance a value is redrawn instead.")
    ttest_alpha: float = Field(0.05, gt=0, lt=1, description="Significance level of the t-test exploit.")
    ttest_window: int = Field(20, ge=2, description="Recent episode returns per member the t-test compares.")
    hyperparameters: dict[SearchedHyperparameter, HyperparameterRange] = Field(
        default_factory=_table_iii, min_length=1, description="Searched PPO fields and their intervals.")

    @model_validator(mode="after")
    def _positive_factors(self) -> PBTAlgorithmConfig:
        if any(factor <= 0 for factor in self.perturb_factors):
            raise ValueError(f"perturb_factors must be positive, got {list(self.perturb_factors)}")
        return self


class PBTRuntimeConfig(CoLocatedTrainingRuntimeConfig):
    """The members of a worker train an interval in lockstep, sampling in turn (`evorl.lockstep`)."""


class PBTStopConfig(Section):
    total_env_frames: int = Field(1_000_000, ge=1, description="Env frames per member after which the run stops.")
    target_return: float | None = Field(None, description="Mean return (over return_window episodes) to reach.")
    return_window: int = Field(20, ge=1, description="Episodes in a member's recent mean return (its score).")
    until: Literal["best", "all"] = Field("best", description="Stop when the best member, or every member, reached it.")
    max_wall_seconds: float | None = Field(None, gt=0, description="Stop after this much wall time.")


class PBTConfig(RootSection):
    """A run of `lamarckian-hpc evolve` with `algorithm.name: pbt`."""

    seed: int = Field(0, ge=0, description="Seed of every random generator of the run.")
    env: EnvConfig = Field(default_factory=EnvConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    ppo: PPOConfig = Field(default_factory=PPOConfig)
    algorithm: PBTAlgorithmConfig = Field(default_factory=PBTAlgorithmConfig)
    runtime: PBTRuntimeConfig = Field(default_factory=PBTRuntimeConfig)
    stop: PBTStopConfig = Field(default_factory=PBTStopConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)

    @model_validator(mode="after")
    def _learning_rate_is_searched_or_annealed(self) -> PBTConfig:
        if self.ppo.anneal_learning_rate and "learning_rate" in self.algorithm.hyperparameters:
            raise ValueError("ppo.anneal_learning_rate must be false when PBT searches learning_rate")
        return self
