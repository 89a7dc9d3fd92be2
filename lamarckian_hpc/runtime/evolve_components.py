"""The problem and the ask/tell algorithm that an `evolve` config names: test problems (ZDT, DTLZ,
sphere, rastrigin, onemax, tsp), the game-balancing test, and NSGA-II or the GA over their coding,
with the hypervolume reference that scores a multi-objective population."""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..config import EvolveConfig, GAConfig
from ..ec import GA, NSGA2, Evaluator, Problem, dtlz, make_crossover, make_mutation, onemax, rastrigin, sphere, tsp, zdt

EvolutionAlgorithm = NSGA2 | GA
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


def make_algorithm(config: EvolveConfig, evaluator: Evaluator) -> EvolutionAlgorithm:
    """NSGA-II or the GA, seeded from the config, over the evaluator's coding."""
    spec, rng = config.algorithm, np.random.default_rng(config.seed)
    coding = evaluator.describe().coding
    if config.problem.name == "balance":  # lineups: NSGA-II with order crossover and lineup swaps
        from ..games.lineup import lineup_operators

        return NSGA2(coding.lower, coding.upper, spec.population_size, rng,
                     crossover_probability=spec.crossover_probability,
                     **lineup_operators(evaluator.coding, spec.crossover_probability))  # type: ignore
    if isinstance(spec, GAConfig):
        crossover = make_crossover(spec.crossover, coding, spec.crossover_probability, spec.crossover_eta)
        mutation = make_mutation(spec.mutation, coding, spec.mutation_eta, spec.mutation_probability)
        return GA(evaluator.initialize, spec.population_size, rng, crossover, mutation, spec.variant, spec.elite_count,
                  spec.tournament_size, spec.offspring_per_step)
    return NSGA2(coding.lower, coding.upper, spec.population_size, rng, spec.crossover_eta,
                 spec.crossover_probability, spec.mutation_eta)


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
