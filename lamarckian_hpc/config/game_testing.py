"""The config of automated game testing runs of `lamarckian-hpc evolve` (`algorithm.name: wuji`):
an EvoRL search over action-sequence policies of the built-in game (`lamarckian_hpc.games`),
rewarded for winning and for novel states, that records the bugs it meets."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from .base import RootSection, Section, StorageConfig
from .population import PopulationRuntimeConfig

PlantedBug = Literal["damage_overflow", "crash_skill_combo", "stuck_battle", "over_max_health"]


class GameConfig(Section):
    data: Path | None = Field(None, description="Folder of the game's tables (heroes.yaml, ...); default the "
                                                "built-in game.")
    planted_bugs: list[PlantedBug] = Field(
        default_factory=list, description="Planted bugs switched on for this run, besides those the rules file "
                                          "switches on.")


class WujiAlgorithmConfig(Section):
    name: Literal["wuji"] = Field("wuji", description="EvoRL algorithm: wuji (automated game testing).")
    population_size: int = Field(20, ge=2, le=4096, description="Action-sequence policies kept per generation "
                                                                "(even: offspring are bred in pairs).")
    episodes: int = Field(1500, ge=1, description="Episode budget of the search, the initial population included.")
    crossover_probability: float = Field(0.9, ge=0, le=1, description="Chance a pair is crossed (uniform).")
    mutation_rate: float | None = Field(None, gt=0, le=1, description="Chance each action is redrawn; default "
                                                                      "2 / testing.max_decisions.")
    compare_random: bool = Field(True, description="Also play the same budget of random episodes and report both.")

    @model_validator(mode="after")
    def _even_population(self) -> WujiAlgorithmConfig:
        if self.population_size % 2:
            raise ValueError(f"population_size must be even (offspring are bred in pairs), got {self.population_size}")
        return self


class GameTestingRuntimeConfig(PopulationRuntimeConfig):
    """Episodes take milliseconds: by default they are played in this process."""

    mode: Literal["ray", "fork", "serial"] = Field(
        "serial", description="serial: episodes are played in this process; fork: on processes forked from it; "
                              "ray: on Ray actors, on every node of the cluster.")


class GameTestingConfig(RootSection):
    """A run of `lamarckian-hpc evolve` with `algorithm.name: wuji`."""

    seed: int = Field(0, ge=0, description="Seed of the search and of every episode.")
    game: GameConfig = Field(default_factory=GameConfig)
    algorithm: WujiAlgorithmConfig = Field(default_factory=WujiAlgorithmConfig)
    runtime: GameTestingRuntimeConfig = Field(default_factory=GameTestingRuntimeConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
