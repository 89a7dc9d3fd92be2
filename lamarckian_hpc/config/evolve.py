"""The config of `lamarckian-hpc evolve`: an EC algorithm (NSGA-II, the GA, the OpenAI ES or
CMA-ES), its problem and how evaluations run. Which operators and algorithms fit which problem is
checked here, when the config is loaded, so that a GA with an order crossover on a real-coded
problem, or CMA-ES on a multi-objective one, stops before anything starts."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from .base import RootSection, Section, StorageConfig
from .population import PopulationRuntimeConfig

MULTI_OBJECTIVE_PROBLEMS = ("zdt1", "zdt2", "zdt3", "zdt4", "zdt6", "dtlz1", "dtlz2", "dtlz3", "dtlz4", "dtlz5",
                            "dtlz6", "dtlz7")
SINGLE_OBJECTIVE_PROBLEMS = ("sphere", "rastrigin", "onemax", "tsp")
#: The coding of each problem's genomes (ec.coding); all the others are real-coded.
PROBLEM_CODINGS = {"onemax": "binary", "tsp": "permutation"}
#: Codings each named operator keeps valid (the same table as ec.variation, which tests compare).
CROSSOVER_CODINGS = {"sbx": ("real", "integer"), "uniform": ("real", "integer", "binary"),
                     "one_point": ("real", "integer", "binary"), "order": ("permutation",)}
MUTATION_CODINGS = {"polynomial": ("real", "integer"), "bit_flip": ("binary",), "swap": ("permutation",),
                    "inversion": ("permutation",)}

ProblemName = Literal["zdt1", "zdt2", "zdt3", "zdt4", "zdt6", "dtlz1", "dtlz2", "dtlz3", "dtlz4", "dtlz5", "dtlz6",
                      "dtlz7", "sphere", "rastrigin", "onemax", "tsp", "balance"]
#: Problems over the built-in game (`lamarckian_hpc.games`): multi-objective, with their own operators.
GAME_PROBLEMS = ("balance",)
#: Single-objective real-coded problems: the ones a distribution-based strategy (es, cmaes) can search.
REAL_SINGLE_OBJECTIVE_PROBLEMS = tuple(name for name in SINGLE_OBJECTIVE_PROBLEMS if name not in PROBLEM_CODINGS)


class ProblemConfig(Section):
    name: ProblemName = Field("zdt1", description="Test problem: ZDT/DTLZ (multi-objective) or sphere, rastrigin, "
                                                  "onemax, tsp (single-objective, for the GA; sphere and "
                                                  "rastrigin also for es and cmaes); balance: the "
                                                  "game-balancing test (nsga2).")
    num_variables: int | None = Field(None, ge=2, description="Decision variables (tsp: cities); default the "
                                                              "problem's own.")
    num_objectives: int | None = Field(None, ge=2, description="Objectives of a DTLZ problem; default 3.")
    evaluation_delay_seconds: float = Field(0.0, ge=0, le=60, description="Extra time per evaluation (tests).")
    game_data: Path | None = Field(None, description="balance: folder of the game's tables (heroes.yaml, ...); "
                                                     "default the built-in game.")

    @model_validator(mode="after")
    def _objectives_for_dtlz_only(self) -> ProblemConfig:
        if self.game_data is not None and self.name not in GAME_PROBLEMS:
            raise ValueError(f"game_data applies to the balance problem only, not {self.name}")
        if self.name in GAME_PROBLEMS and self.num_variables is not None:
            raise ValueError("num_variables does not apply to balance (the game data fixes the lineup)")
        if self.num_objectives is not None and not self.name.startswith("dtlz"):
            raise ValueError(f"num_objectives applies to dtlz problems only, not {self.name}")
        objectives = self.num_objectives or 3
        if self.name.startswith("dtlz") and self.num_variables is not None and self.num_variables < objectives:
            raise ValueError(f"num_variables of {self.name} must be at least num_objectives ({objectives}), "
                             f"got {self.num_variables}")
        return self

    @property
    def coding(self) -> str:
        return PROBLEM_CODINGS.get(self.name, "real")


class NSGA2Config(Section):
    name: Literal["nsga2"] = Field("nsga2", description="EC algorithm: nsga2, ga, es or cmaes.")
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


class GAConfig(Section):
    name: Literal["ga"] = Field("ga", description="EC algorithm: nsga2, ga, es or cmaes.")
    variant: Literal["generational", "steady_state"] = Field(
        "generational", description="generational: offspring replace all but the elites each round; steady_state: "
                                    "a few offspring per round join, the worst members leave.")
    population_size: int = Field(100, ge=2, description="Individuals in the population.")
    generations: int = Field(200, ge=1, description="Ask/tell rounds, the random initial one included.")
    elite_count: int = Field(1, ge=0, description="generational: best members kept unchanged each round.")
    offspring_per_step: int = Field(2, ge=1, description="steady_state: offspring bred and evaluated per round.")
    tournament_size: int = Field(2, ge=1, description="Members drawn per selection tournament.")
    crossover: Literal["sbx", "uniform", "one_point", "order"] | None = Field(
        None, description="Crossover; default the coding's: sbx (real), uniform (binary), order (permutation).")
    crossover_probability: float = Field(0.9, ge=0, le=1, description="Chance a pair is crossed.")
    crossover_eta: float = Field(15.0, gt=0, description="SBX distribution index.")
    mutation: Literal["polynomial", "bit_flip", "swap", "inversion"] | None = Field(
        None, description="Mutation; default the coding's: polynomial (real), bit_flip (binary), inversion "
                          "(permutation).")
    mutation_eta: float = Field(20.0, gt=0, description="Polynomial mutation distribution index.")
    mutation_probability: float | None = Field(
        None, ge=0, le=1, description="Per variable (default 1/d), or per genome for permutations (default 1).")

    @model_validator(mode="after")
    def _elites_fit(self) -> GAConfig:
        if self.elite_count >= self.population_size:
            raise ValueError(f"elite_count ({self.elite_count}) must be below population_size ({self.population_size})")
        return self


class ESConfig(Section):
    name: Literal["es"] = Field("es", description="EC algorithm: nsga2, ga, es or cmaes.")
    population_size: int = Field(50, ge=2, description="Perturbations per generation (even: antithetic pairs).")
    generations: int = Field(200, ge=1, description="Ask/tell rounds.")
    sigma: float = Field(0.1, gt=0, description="Standard deviation of the Gaussian perturbations, in genome units.")
    learning_rate: float = Field(0.05, gt=0, description="Adam step size on the mean (about the distance the mean "
                                                         "moves per variable and generation).")
    initial_mean: Literal["sample", "center"] = Field(
        "sample", description="Where the mean starts: sample (one genome drawn uniformly within the bounds) or "
                              "center (the middle of the bounds, which is the optimum of sphere and rastrigin).")

    @model_validator(mode="after")
    def _even_population(self) -> ESConfig:
        if self.population_size % 2:
            raise ValueError(f"population_size must be even (antithetic pairs), got {self.population_size}")
        return self


class CMAESConfig(Section):
    name: Literal["cmaes"] = Field("cmaes", description="EC algorithm: nsga2, ga, es or cmaes.")
    population_size: int | None = Field(None, ge=2, description="Samples per generation; default cma's, "
                                                                "4 + floor(3 ln d).")
    generations: int = Field(200, ge=1, description="Ask/tell rounds.")
    sigma: float = Field(1.0, gt=0, description="Initial step size, in genome units (about a quarter of the "
                                                "bounds' width is a common choice).")
    initial_mean: Literal["sample", "center"] = Field(
        "sample", description="Where the mean starts: sample (one genome drawn uniformly within the bounds) or "
                              "center (the middle of the bounds, which is the optimum of sphere and rastrigin).")


EvolveAlgorithmConfig = Annotated[NSGA2Config | GAConfig | ESConfig | CMAESConfig, Field(discriminator="name")]
EVOLVE_ALGORITHMS: dict[str, type[Section]] = {"nsga2": NSGA2Config, "ga": GAConfig, "es": ESConfig,
                                               "cmaes": CMAESConfig}


class EvolveRuntimeConfig(PopulationRuntimeConfig):
    """Evaluations queue for the workers, one per worker at a time, and are collected as they finish."""


class EvolveConfig(RootSection):
    """A run of `lamarckian-hpc evolve`: an EC algorithm on a problem, evaluated asynchronously."""

    seed: int = Field(0, ge=0, description="Seed of every random generator of the run.")
    problem: ProblemConfig = Field(default_factory=ProblemConfig)
    algorithm: EvolveAlgorithmConfig = Field(default_factory=NSGA2Config)
    runtime: EvolveRuntimeConfig = Field(default_factory=EvolveRuntimeConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)

    @field_validator("algorithm", mode="before")
    @classmethod
    def _known_algorithm(cls, section: Any) -> Any:
        """An algorithm section without a name is NSGA-II's (the discriminated union needs the tag);
        an unknown name is reported with the names allowed."""
        if isinstance(section, dict):
            name = section.get("name", "nsga2")
            if not isinstance(name, str) or name not in EVOLVE_ALGORITHMS:
                raise ValueError(f"unknown name {name!r} (allowed names: {', '.join(EVOLVE_ALGORITHMS)})")
            section = {**section, "name": name}
        return section

    @model_validator(mode="after")
    def _algorithm_fits_problem(self) -> EvolveConfig:
        problem, algorithm = self.problem, self.algorithm
        if isinstance(algorithm, NSGA2Config) and problem.name not in MULTI_OBJECTIVE_PROBLEMS + GAME_PROBLEMS:
            raise ValueError(f"algorithm nsga2 needs a multi-objective problem "
                             f"({', '.join(MULTI_OBJECTIVE_PROBLEMS + GAME_PROBLEMS)}), "
                             f"got problem.name {problem.name}")
        if isinstance(algorithm, GAConfig):
            if problem.name not in SINGLE_OBJECTIVE_PROBLEMS:
                raise ValueError(f"algorithm ga needs a single-objective problem ({', '.join(SINGLE_OBJECTIVE_PROBLEMS)}), "
                                 f"got problem.name {problem.name}")
            for kind, chosen, table in (("crossover", algorithm.crossover, CROSSOVER_CODINGS),
                                        ("mutation", algorithm.mutation, MUTATION_CODINGS)):
                if chosen is not None and problem.coding not in table[chosen]:
                    fitting = [name for name, codings in table.items() if problem.coding in codings]
                    raise ValueError(f"algorithm.{kind} {chosen} does not fit problem {problem.name} "
                                     f"({problem.coding} coding); use one of {', '.join(fitting)}")
        if isinstance(algorithm, (ESConfig, CMAESConfig)) and problem.name not in REAL_SINGLE_OBJECTIVE_PROBLEMS:
            raise ValueError(f"algorithm {algorithm.name} needs a single-objective real-coded problem: "
                             f"problem.name must be one of {', '.join(REAL_SINGLE_OBJECTIVE_PROBLEMS)}, "
                             f"got {problem.name}")
        return self
