"""Evolutionary computation: test problems against pymoo's, ranking by hand, operators' bounds,
and NSGA-II reaching ZDT1's front with its lineage recorded."""

from __future__ import annotations

import numpy as np
import pytest
from pymoo.problems import get_problem

from lamarckian_hpc.ec import NSGA2, crowding_distance, dtlz, dtlz2, hypervolume, non_dominated_fronts, zdt
from lamarckian_hpc.ec.operators import polynomial_mutation, sbx


@pytest.mark.parametrize("ours, name", [(zdt(1), "zdt1"), (zdt(2), "zdt2"), (zdt(3), "zdt3"), (dtlz2(), "dtlz2")])
def test_problems_agree_with_pymoo(ours, name):
    reference = get_problem(name, n_var=ours.num_variables)
    X = np.random.default_rng(0).random((50, ours.num_variables))
    np.testing.assert_allclose(ours.evaluate(X), reference.evaluate(X), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("number, num_variables", [(4, 10), (6, 10)])
def test_zdt4_and_zdt6_agree_with_pymoo_in_sizes_bounds_and_values(number, num_variables):
    ours = zdt(number)
    reference = get_problem(f"zdt{number}")
    assert ours.num_variables == reference.n_var == num_variables  # the paper's default size
    np.testing.assert_array_equal(ours.lower, reference.xl)
    np.testing.assert_array_equal(ours.upper, reference.xu)
    X = ours.lower + np.random.default_rng(number).random((200, num_variables)) * (ours.upper - ours.lower)
    np.testing.assert_allclose(ours.evaluate(X), reference.evaluate(X), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("number", range(1, 8))
@pytest.mark.parametrize("num_objectives", [2, 3, 5])
def test_dtlz_agrees_with_pymoo(number, num_objectives):
    ours = dtlz(number, num_objectives)
    k = {1: 5, 7: 20}.get(number, 10)  # the paper's distance-part sizes
    assert ours.num_variables == num_objectives - 1 + k and ours.num_objectives == num_objectives
    assert (ours.lower == 0).all() and (ours.upper == 1).all()
    reference = get_problem(f"dtlz{number}", n_var=ours.num_variables, n_obj=num_objectives)
    X = np.random.default_rng(number).random((200, ours.num_variables))
    X[:3] = np.array([[0.0], [1.0], [0.5]])  # the corners and the centre, where fronts and g's minima lie
    np.testing.assert_allclose(ours.evaluate(X), reference.evaluate(X), rtol=1e-10, atol=1e-12)


def test_fronts_and_crowding_by_hand():
    F = np.array([[1.0, 4.0], [2.0, 2.0], [4.0, 1.0], [3.0, 3.0], [5.0, 5.0]])
    fronts = non_dominated_fronts(F)
    assert [sorted(front.tolist()) for front in fronts] == [[0, 1, 2], [3], [4]]
    distance = crowding_distance(F[[0, 1, 2]])
    assert np.isinf(distance[0]) and np.isinf(distance[2])
    # middle point: (4 - 1) / 3 + (4 - 1) / 3 along the two objectives
    assert distance[1] == pytest.approx(2.0)


def test_operators_stay_in_bounds_and_are_reproducible():
    lower, upper = np.zeros(5), np.ones(5)
    parents = np.random.default_rng(1).random((20, 5))
    children_a, children_b = sbx(parents[:10], parents[10:], lower, upper, np.random.default_rng(2))
    again_a, _ = sbx(parents[:10], parents[10:], lower, upper, np.random.default_rng(2))
    np.testing.assert_array_equal(children_a, again_a)
    mutated = polynomial_mutation(np.concatenate([children_a, children_b]), lower, upper, np.random.default_rng(3),
                                  variable_probability=1.0)
    for genomes in (children_a, children_b, mutated):
        assert ((genomes >= 0) & (genomes <= 1)).all()
    assert not np.allclose(mutated, np.concatenate([children_a, children_b]))
    # SBX keeps each variable's pair mean (before clipping, which these interior parents rarely need)
    np.testing.assert_allclose((children_a + children_b).mean(), (parents[:10] + parents[10:]).mean(), atol=0.05)


def test_nsga2_reaches_the_zdt1_front_and_records_lineage():
    problem = zdt(1)
    algorithm = NSGA2(problem.lower, problem.upper, 100, np.random.default_rng(0))
    first_ids = None
    for generation in range(200):
        genomes = algorithm.ask()
        algorithm.tell(genomes, problem.evaluate(genomes))
        if generation == 0:
            first_ids = set(algorithm.ids.tolist())
            assert (algorithm.parent_ids == -1).all()
    assert hypervolume(algorithm.objectives, np.array([1.1, 1.1])) >= 0.859  # pymoo's mean 0.868, less 1%
    assert len(set(algorithm.ids.tolist())) == 100
    assert (algorithm.parent_ids >= 0).any()  # survivors born of crossover name their parents
    assert first_ids is not None and max(algorithm.ids) >= 100 * 199


def test_nsga2_refuses_an_odd_population():
    with pytest.raises(ValueError, match="even"):
        NSGA2(np.zeros(2), np.ones(2), 7, np.random.default_rng(0))


def _sphere(genomes: np.ndarray) -> np.ndarray:
    return ((genomes - 0.3) ** 2).sum(axis=1)


def test_centered_ranks():
    from lamarckian_hpc.ec import centered_ranks

    np.testing.assert_allclose(centered_ranks(np.array([10.0, -3.0, 7.0])), [0.5, -0.5, 0.0])


def test_openai_es_descends_a_sphere():
    from lamarckian_hpc.ec import OpenAIES

    strategy = OpenAIES(np.full(10, 2.0), sigma=0.1, population_size=50, rng=np.random.default_rng(0))
    start = _sphere(strategy.mean[None])[0]
    for _ in range(300):
        genomes = strategy.ask()
        strategy.tell(genomes, _sphere(genomes))
    assert _sphere(strategy.mean[None])[0] < 0.01 * start


def test_cmaes_through_cma_finds_the_sphere_minimum():
    from lamarckian_hpc.ec import CMAES

    strategy = CMAES(np.full(5, 2.0), sigma=0.5, rng=np.random.default_rng(0))
    for _ in range(150):
        genomes = strategy.ask()
        strategy.tell(genomes, _sphere(genomes))
    best, value = strategy.best
    assert value < 1e-6
    np.testing.assert_allclose(best, 0.3, atol=1e-3)
