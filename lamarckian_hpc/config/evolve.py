"""The config of `lamarckian-hpc evolve`: an EC algorithm, its problem and how evaluations run."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .base import RootSection, Section, StorageConfig


class ProblemConfig(Section):
    name: Literal["zdt1", "zdt2", "zdt3", "dtlz2"] = Field("zdt1", description="Test problem.")
    num_variables: int | None = Field(None, ge=2, description="Decision variables; default the problem's own.")
    evaluation_delay_seconds: float = Field(0.0, ge=0, le=60, description="Extra time per evaluation (tests).")


class NSGA2Config(Section):
    name: Literal["nsga2"] = Field("nsga2", description="EC algorithm.")
    population_size: int = Field(100, ge=2, description="Individuals per generation (even).")
    generations: int = Field(200, ge=1, description="Generations, the random initial one included.")
    crossover_eta: float = Field(15.0, gt=0, description="SBX distribution index.")
    crossover_probability: float = Field(0.9, ge=0, le=1, description="Chance a pair is crossed.")
    mutation_eta: float = Field(20.0, gt=0, description="Polynomial mutation distribution index.")

    @model_validator(mode="after")
    def _even_population(self) -> NSGA2Config:
        if self.population_size % 2:
            raise ValueError(f"population_size must be even, got {self.population_size}")
        return self


class EvolveRuntimeConfig(Section):
    mode: Literal["ray", "serial"] = Field("ray", description="ray: evaluations on Ray workers; serial: here.")
    num_workers: int | None = Field(None, ge=1, description="Concurrent evaluations; default one per core.")
    ray_address: str | None = Field(None, description="Join this Ray cluster; default starts a local one.")
    evaluation_timeout_seconds: float = Field(600.0, gt=0, description="An evaluation slower than this fails.")


class EvolveConfig(RootSection):
    """A run of `lamarckian-hpc evolve`: an EC algorithm on a problem, evaluated asynchronously."""

    seed: int = Field(0, ge=0, description="Seed of every random generator of the run.")
    problem: ProblemConfig = Field(default_factory=ProblemConfig)
    algorithm: NSGA2Config = Field(default_factory=NSGA2Config)
    runtime: EvolveRuntimeConfig = Field(default_factory=EvolveRuntimeConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
