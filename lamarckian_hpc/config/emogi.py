"""The config of EMOGI runs of `lamarckian-hpc evolve` (`algorithm.name: emogi`).

EMOGI evolves, by NSGA-II, the weights of the behaviour terms of a reward; each individual is a PPO
policy trained with its weighted reward on the vector Pong and scored on behaviour objectives. The
env, model and PPO sections are those of `lamarckian-hpc train`, so an individual trains exactly
like a single run would.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from .base import RootSection, Section, StorageConfig
from .population import CoLocatedTrainingRuntimeConfig
from .train import EnvConfig, ModelConfig, PPOConfig

#: Environments whose steps can carry EMOGI's move and stay reward terms.
EMOGI_ENV_IDS = ("lamarckian/Pong-v0",)
#: Env kwargs EMOGI sets itself, per individual.
BEHAVIOUR_KWARGS = ("move_reward", "stay_reward")


class EMOGIAlgorithmConfig(Section):
    name: Literal["emogi"] = Field("emogi", description="EvoRL algorithm: emogi (NSGA-II over behaviour reward weights).")
    population_size: int = Field(8, ge=2, le=4096, description="Policies per generation (even).")
    generations: int = Field(4, ge=1, description="Generations, the random initial one included.")
    weight_bounds: tuple[float, float] = Field(
        (0.0, 1.0), description="Interval of both genome entries: the activeness and laziness reward weights.")
    reward_horizon_steps: int = Field(
        30, ge=1, description="T of move(a) = 1/T: a weight w adds w/T per step moved (or stayed).")
    activeness_objective_weight: float = Field(
        1.0, gt=0, description="Objectives are score + this * activeness, and score + this * (1 - activeness).")
    initial_env_frames: int = Field(100_000, ge=1, description="PPO env frames of a first-generation policy.")
    offspring_env_frames: int = Field(40_000, ge=1, description="PPO env frames of an offspring policy.")
    inherit_weights: bool = Field(
        True, description="Offspring start from their first parent's trained policy (Lamarckian); else from scratch.")
    evaluation_episodes: int = Field(10, ge=1, description="Episodes that measure a trained policy's behaviour.")
    crossover_eta: float = Field(15.0, gt=0, description="SBX distribution index.")
    crossover_probability: float = Field(0.9, ge=0, le=1, description="Chance a pair is crossed.")
    mutation_eta: float = Field(20.0, gt=0, description="Polynomial mutation distribution index.")

    @model_validator(mode="after")
    def _valid(self) -> EMOGIAlgorithmConfig:
        if self.population_size % 2:
            raise ValueError(f"population_size must be even, got {self.population_size}")
        low, high = self.weight_bounds
        if not low < high:
            raise ValueError(f"weight_bounds must be [low, high] with low < high, got [{low}, {high}]")
        return self


class EMOGIRuntimeConfig(CoLocatedTrainingRuntimeConfig):
    """With `batched_updates` a generation's policies are shared out among the workers and each
    worker's train in lockstep; without, each policy is a request of its own, trained by the first
    idle worker."""


def _pong() -> EnvConfig:
    return EnvConfig(id="lamarckian/Pong-v0", num_envs=8)


class EMOGIConfig(RootSection):
    """A run of `lamarckian-hpc evolve` with `algorithm.name: emogi`."""

    seed: int = Field(0, ge=0, description="Seed of every random generator of the run.")
    env: EnvConfig = Field(default_factory=_pong)
    model: ModelConfig = Field(default_factory=ModelConfig)
    ppo: PPOConfig = Field(default_factory=PPOConfig)
    algorithm: EMOGIAlgorithmConfig = Field(default_factory=EMOGIAlgorithmConfig)
    runtime: EMOGIRuntimeConfig = Field(default_factory=EMOGIRuntimeConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)

    @field_validator("env", mode="before")
    @classmethod
    def _pong_by_default(cls, section: Any) -> Any:
        """An env section that names no id means the vector Pong, not train's default env."""
        return {"id": EMOGI_ENV_IDS[0], **section} if isinstance(section, dict) else section

    @field_validator("env", mode="after")
    @classmethod
    def _behaviour_env(cls, env: EnvConfig) -> EnvConfig:
        if env.id not in EMOGI_ENV_IDS:
            raise ValueError(f"id must be one of {', '.join(EMOGI_ENV_IDS)} for emogi, got {env.id!r}")
        taken = sorted(set(BEHAVIOUR_KWARGS) & set(env.kwargs))
        if taken:
            raise ValueError(f"kwargs must not set {', '.join(taken)}: emogi sets them per policy")
        return env
