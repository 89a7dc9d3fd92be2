"""The GA solves a sphere, OneMax and a small travelling salesman (generational and
steady-state, fixed seeds, stated tolerances), records lineage, and is reproducible; problems are
Evaluators; Population reads out Individuals."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from lamarckian_hpc.ec import (
    GA,
    Coding,
    Description,
    Evaluator,
    Population,
    make_crossover,
    make_mutation,
    onemax,
    sphere,
    tsp,
    zdt,
)


def _ga(problem, variant, population_size=50, seed=0, **settings) -> GA:
    coding = problem.coding
    return GA(problem.initialize, population_size, np.random.default_rng(seed), make_crossover(None, coding),
              make_mutation(None, coding), variant, **settings)


def _run(algorithm: GA, problem, rounds: int) -> GA:
    for _ in range(rounds):
        genomes = algorithm.ask()
        algorithm.tell(genomes, problem.evaluate(genomes))
    return algorithm


# (problem, variant, rounds, settings, tolerance above the optimum)
CASES = [
    ("sphere", "generational", 300, {"tournament_size": 3, "elite_count": 2}, 1e-4),
    ("sphere", "steady_state", 3000, {"offspring_per_step": 4}, 1e-3),
    ("onemax", "generational", 100, {}, 0.0),
    ("onemax", "steady_state", 1000, {"offspring_per_step": 4}, 0.0),
    ("tsp", "generational", 500, {"population_size": 100, "tournament_size": 3, "elite_count": 5}, 1e-9),
    ("tsp", "steady_state", 3000, {"population_size": 100, "offspring_per_step": 4}, 1e-9),
]
PROBLEMS = {"sphere": lambda: sphere(10), "onemax": lambda: onemax(50), "tsp": lambda: tsp(20)}


@pytest.mark.parametrize("name, variant, rounds, settings, tolerance", CASES)
def test_ga_solves_the_problem(name, variant, rounds, settings, tolerance):
    problem = PROBLEMS[name]()
    settings = dict(settings)
    population_size = settings.pop("population_size", 50)
    algorithm = _run(_ga(problem, variant, population_size, **settings), problem, rounds)
    best, value = algorithm.best
    assert value <= problem.optimum + tolerance
    assert problem.evaluate(best[None])[0, 0] == value
    assert problem.coding.valid(algorithm.genomes).all()
    assert len(algorithm.population) == population_size


def test_random_search_does_not_solve_the_tsp():
    """The TSP instance is not trivial: as many random tours as the GA evaluates stay far from the optimum."""
    problem = tsp(20)
    tours = problem.initialize(np.random.default_rng(0), 100 + 499 * 95)
    assert problem.evaluate(tours).min() > 1.5 * problem.optimum


def test_generational_ga_keeps_its_elites_and_records_lineage():
    problem = sphere(5)
    algorithm = _ga(problem, "generational", 20, elite_count=3)
    genomes = algorithm.ask()
    algorithm.tell(genomes, problem.evaluate(genomes))
    assert (algorithm.parent_ids == -1).all() and algorithm.ids.tolist() == list(range(20))
    best_before = np.sort(algorithm.objectives[:, 0])[:3]
    earlier = set(algorithm.ids.tolist())
    offspring = algorithm.ask()
    assert len(offspring) == 17
    algorithm.tell(offspring, problem.evaluate(offspring))
    np.testing.assert_array_equal(algorithm.objectives[:3, 0], best_before)  # the elites survive unchanged
    assert algorithm.told_ids.tolist() == list(range(20, 37))
    assert set(algorithm.told_parent_ids.ravel().tolist()) <= earlier


def test_steady_state_offspring_replace_only_worse_members():
    problem = sphere(5)
    algorithm = _ga(problem, "steady_state", 20, offspring_per_step=2)
    genomes = algorithm.ask()
    algorithm.tell(genomes, problem.evaluate(genomes))
    for _ in range(50):
        before = np.sort(algorithm.objectives[:, 0])
        offspring = algorithm.ask()
        assert len(offspring) == 2
        algorithm.tell(offspring, problem.evaluate(offspring))
        assert (np.sort(algorithm.objectives[:, 0]) <= before).all()  # the population only improves


def test_ga_is_reproducible_and_picklable():
    problem = onemax(30)
    first = _run(_ga(problem, "generational", seed=3), problem, 10)
    second = _run(_ga(problem, "generational", seed=3), problem, 10)
    np.testing.assert_array_equal(first.genomes, second.genomes)
    restored = pickle.loads(pickle.dumps(first))
    np.testing.assert_array_equal(restored.ask(), first.ask())


def test_ga_refuses_several_objectives_and_bad_settings():
    problem = zdt(1)
    algorithm = _ga(problem, "generational", 10)
    genomes = algorithm.ask()
    with pytest.raises(ValueError, match="single-objective"):
        algorithm.tell(genomes, problem.evaluate(genomes))
    with pytest.raises(ValueError, match="elite_count"):
        _ga(problem, "generational", 10, elite_count=10)
    with pytest.raises(ValueError, match="variant"):
        _ga(problem, "island")


def test_problems_are_evaluators_that_describe_their_coding():
    for problem, kind in [(sphere(), "real"), (onemax(), "binary"), (tsp(12), "permutation"), (zdt(4), "real")]:
        assert isinstance(problem, Evaluator)
        description = problem.describe()
        assert isinstance(description, Description) and description.coding.kind == kind
        assert description.num_objectives == problem.num_objectives
        genomes = problem.initialize(np.random.default_rng(0), 8)
        assert description.coding.valid(genomes).all()
        assert problem.evaluate(genomes).shape == (8, problem.num_objectives)
    assert zdt(4).describe().coding.lower[1] == -5.0


def test_population_reads_out_individuals():
    population = Population(np.arange(6.0).reshape(3, 2), np.array([[3.0], [1.0], [2.0]]), np.array([7, 8, 9]),
                            np.array([[-1, -1], [7, 7], [7, 8]]))
    member = population[2]
    assert member.id == 9 and member.parent_ids == (7, 8)
    np.testing.assert_array_equal(member.genome, [4.0, 5.0])
    both = population.take(np.array([1])).concatenate(population.take(np.array([0])))
    assert both.ids.tolist() == [8, 7] and len(both) == 2
    with pytest.raises(ValueError, match="length"):
        Population(np.zeros((2, 2)), np.zeros((3, 1)), np.arange(2), np.zeros((2, 2)))
    with pytest.raises(ValueError, match="coding kind"):
        Coding("tree", np.zeros(2), np.ones(2))


def _shifted_squares(X: np.ndarray) -> np.ndarray:
    return ((X - 3.0) ** 2).sum(axis=1, keepdims=True)


@pytest.mark.parametrize("variant, rounds, settings", [("generational", 100, {}),
                                                       ("steady_state", 1000, {"offspring_per_step": 4})])
def test_ga_solves_an_integer_problem_with_rounding_operators(variant, rounds, settings):
    """Integer coding: rounding SBX and polynomial mutation find the lattice point (3, ..., 3) exactly."""
    from lamarckian_hpc.ec import Problem

    problem = Problem("integer-squares", 8, 1, np.full(8, -10.0), np.full(8, 10.0), _shifted_squares,
                      coding_kind="integer", optimum=0.0)
    algorithm = _run(_ga(problem, variant, 40, **settings), problem, rounds)
    assert problem.coding.valid(algorithm.genomes).all()  # integers within bounds throughout
    best, value = algorithm.best
    assert value == 0.0
    np.testing.assert_array_equal(best, 3.0)
