"""The problem and the ask/tell algorithm that an `evolve` config names: test problems (ZDT, DTLZ,
sphere, rastrigin, onemax, tsp), the game-balancing test, and NSGA-II, the GA, the OpenAI ES or
CMA-ES over their coding, with the hypervolume reference that scores a multi-objective population.
Every algorithm built here gives the interface of `ec.ask_tell.AskTell`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from ..config import EvolveConfig
from ..config.evolve import EVOLVE_ALGORITHMS
from ..ec import (
    GA,
    NSGA2,
    Evaluator,
    OpenAIES,
    Problem,
    dtlz,
    make_crossover,
    make_mutation,
    onemax,
    rastrigin,
    sphere,
    tsp,
    zdt,
)

if TYPE_CHECKING:
    from ..ec.cmaes import CMAES

EvolutionAlgorithm = Union[NSGA2, GA, OpenAIES, "CMAES"]
SINGLE_OBJECTIVE_FACTORIES: dict[str, Callable[..., Problem]] = {"sphere": sphere, "rastrigin": rastrigin,
                                                                  "onemax": onemax, "tsp": tsp}


def make_problem(config: EvolveConfig) -> Problem:
    """The configured test problem (tsp: the fixed circle instance, whatever the run's seed)."""
    spec = config.problem
    if spec.name == "balance":  # the game-balancing test over the built-in game (or spec.game_data)
        from ..games.balance import BalanceProblem

        return BalanceProblem(spec.game_data)  # type: ignore[return-value]
    if spec.name.startswith("zdt"):
        return zdt(int(spec.name[3:]), spec.num_variables)
    if spec.name.startswith("dtlz"):
        return dtlz(int(spec.name[4:]), spec.num_objectives or 3, spec.num_variables)
    factory = SINGLE_OBJECTIVE_FACTORIES[spec.name]
    return factory(spec.num_variables) if spec.num_variables else factory()


def _initial_mean(spec: Any, evaluator: Evaluator, rng: np.random.Generator) -> np.ndarray:
    """Where the ES and CMA-ES start: one genome sampled uniformly within the bounds (`initial_mean:
    sample`, the default: the test problems' optimum is the centre of their bounds, so starting
    there would find it without searching) or the centre of the bounds (`initial_mean: center`)."""
    coding = evaluator.describe().coding
    return evaluator.initialize(rng, 1)[0] if spec.initial_mean == "sample" else (coding.lower + coding.upper) / 2.0


def _nsga2(spec: Any, evaluator: Evaluator, rng: np.random.Generator) -> NSGA2:
    coding = evaluator.describe().coding
    return NSGA2(coding.lower, coding.upper, spec.population_size, rng, spec.crossover_eta,
                 spec.crossover_probability, spec.mutation_eta)


def _ga(spec: Any, evaluator: Evaluator, rng: np.random.Generator) -> GA:
    coding = evaluator.describe().coding
    crossover = make_crossover(spec.crossover, coding, spec.crossover_probability, spec.crossover_eta)
    mutation = make_mutation(spec.mutation, coding, spec.mutation_eta, spec.mutation_probability)
    return GA(evaluator.initialize, spec.population_size, rng, crossover, mutation, spec.variant, spec.elite_count,
              spec.tournament_size, spec.offspring_per_step)


def _es(spec: Any, evaluator: Evaluator, rng: np.random.Generator) -> OpenAIES:
    coding = evaluator.describe().coding
    return OpenAIES(_initial_mean(spec, evaluator, rng), spec.sigma, spec.population_size, rng, spec.learning_rate,
                    lower=coding.lower, upper=coding.upper)


def _cmaes(spec: Any, evaluator: Evaluator, rng: np.random.Generator) -> CMAES:
    from ..ec.cmaes import CMAES  # on first use: cma imports scipy

    coding = evaluator.describe().coding
    return CMAES(_initial_mean(spec, evaluator, rng), spec.sigma, rng, spec.population_size, coding.lower,
                 coding.upper)


@dataclass(frozen=True)
class ECAlgorithm:
    """An EC algorithm an evolve config can name: its config model (`config/evolve.py`) and how
    its ask/tell algorithm is built from that config's section, the evaluator and the run's generator."""

    name: str
    build: Callable[[Any, Evaluator, np.random.Generator], EvolutionAlgorithm]

    @property
    def config(self) -> type:
        return EVOLVE_ALGORITHMS[self.name]


EC_ALGORITHMS: dict[str, ECAlgorithm] = {entry.name: entry for entry in (
    ECAlgorithm("nsga2", _nsga2), ECAlgorithm("ga", _ga), ECAlgorithm("es", _es), ECAlgorithm("cmaes", _cmaes))}
assert set(EC_ALGORITHMS) == set(EVOLVE_ALGORITHMS), "every algorithm config of config/evolve.py needs an entry here"


def make_algorithm(config: EvolveConfig, evaluator: Evaluator) -> EvolutionAlgorithm:
    """The configured algorithm, seeded from the config, over the evaluator's coding. Game
    balancing searches lineups (permutations): NSGA-II with order crossover and lineup swaps."""
    spec, rng = config.algorithm, np.random.default_rng(config.seed)
    if config.problem.name == "balance":
        from ..games.lineup import lineup_operators

        coding = evaluator.describe().coding
        return NSGA2(coding.lower, coding.upper, spec.population_size, rng,  # type: ignore[union-attr]
                     crossover_probability=spec.crossover_probability,  # type: ignore[union-attr]
                     **lineup_operators(evaluator.coding, spec.crossover_probability))  # type: ignore
    return EC_ALGORITHMS[spec.name].build(spec, evaluator, rng)


def hypervolume_reference(config: EvolveConfig, num_objectives: int) -> np.ndarray:
    """1.1 times the nadir of the problem's Pareto front: 1 per objective for ZDT and DTLZ2-6,
    0.5 for DTLZ1, and 2M for DTLZ7's last objective; the origin for balance, whose negated objectives
    are all at most 0."""
    if config.problem.name == "balance":
        return np.zeros(num_objectives)
    nadir = np.ones(num_objectives)
    if config.problem.name == "dtlz1":
        nadir[:] = 0.5
    elif config.problem.name == "dtlz7":
        nadir[-1] = 2.0 * num_objectives
    return 1.1 * nadir
