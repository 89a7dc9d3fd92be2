"""The one interface of the generational ask/tell algorithms (`ec.ask_tell.AskTell`): NSGA-II, the
GA, the OpenAI ES and CMA-ES each give lineage after every tell, a view of the current
population, and a state of plain data that survives msgpack and, loaded into a fresh algorithm
built with the same settings (and another seed), continues exactly as the saved one would have."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from ask_tell_lockstep import assert_lockstep
from plain_state import through_msgpack

from lamarckian_hpc.ec import GA, NSGA2, OpenAIES, make_crossover, make_mutation, sphere, zdt
from lamarckian_hpc.ec.ask_tell import AskTell

SPHERE = sphere(6)
ZDT = zdt(1, 8)


def _nsga2(seed: int) -> NSGA2:
    return NSGA2(ZDT.lower, ZDT.upper, 12, np.random.default_rng(seed))


def _ga(seed: int) -> GA:
    coding = SPHERE.coding
    return GA(SPHERE.initialize, 10, np.random.default_rng(seed), make_crossover(None, coding),
              make_mutation(None, coding), elite_count=2)


def _es(seed: int) -> OpenAIES:
    return OpenAIES(np.full(6, 2.0), 0.3, 10, np.random.default_rng(seed), lower=SPHERE.lower, upper=SPHERE.upper)


def _cmaes(seed: int):
    from lamarckian_hpc.ec import CMAES

    return CMAES(np.full(6, 2.0), 1.0, np.random.default_rng(seed), 8, SPHERE.lower, SPHERE.upper)


BUILDERS: dict[str, tuple[Callable[[int], Any], Any]] = {
    "nsga2": (_nsga2, ZDT), "ga": (_ga, SPHERE), "es": (_es, SPHERE), "cmaes": (_cmaes, SPHERE)}


def _generation(algorithm: Any, problem: Any) -> np.ndarray:
    genomes = algorithm.ask()
    algorithm.tell(genomes, problem.evaluate(genomes))
    return genomes


@pytest.mark.parametrize("name", list(BUILDERS))
def test_each_algorithm_gives_the_interface_and_lineage(name):
    build, problem = BUILDERS[name]
    algorithm = build(0)
    assert isinstance(algorithm, AskTell)
    assert algorithm.population is None and algorithm.genomes is None
    seen: list[int] = []
    for _ in range(4):
        genomes = algorithm.ask()
        parents = algorithm.asked_parent_ids
        assert parents is not None and parents.shape == (len(genomes), 2)
        objectives = problem.evaluate(genomes)
        algorithm.tell(genomes, objectives)
        assert algorithm.told_ids.shape == (len(genomes),) and algorithm.told_parent_ids.shape == (len(genomes), 2)
        np.testing.assert_array_equal(algorithm.told_parent_ids, parents)
        np.testing.assert_array_equal(algorithm.told_objectives, objectives.reshape(len(genomes), -1))
        assert set(algorithm.told_parent_ids[algorithm.told_parent_ids >= 0].tolist()) <= set(seen)
        seen += algorithm.told_ids.tolist()
        assert algorithm.counter.next_id == len(seen) == len(set(seen))
        assert len(algorithm.ids) == len(algorithm.genomes) == len(algorithm.objectives)
        assert set(algorithm.ids.tolist()) <= set(seen)
    if name in ("es", "cmaes"):  # samples of a distribution: no individual parents, the last generation
        assert (algorithm.told_parent_ids == -1).all()
        np.testing.assert_array_equal(algorithm.ids, algorithm.told_ids)
    else:
        assert (algorithm.told_parent_ids >= 0).all()


@pytest.mark.parametrize("name", list(BUILDERS))
def test_a_loaded_state_continues_exactly(name):
    build, problem = BUILDERS[name]
    original = build(0)
    for _ in range(5):
        _generation(original, problem)
    state = through_msgpack(original.state_dict())
    loaded = build(123)  # another seed: everything that matters comes from the state
    loaded.load_state_dict(state)
    np.testing.assert_array_equal(loaded.genomes, original.genomes)
    np.testing.assert_array_equal(loaded.ids, original.ids)
    assert_lockstep(original, loaded, problem, generations=4)
    assert loaded.counter.next_id == original.counter.next_id


def test_a_fresh_state_loads_too():
    for name, (build, _) in BUILDERS.items():
        fresh = build(5)
        loaded = build(6)
        loaded.load_state_dict(through_msgpack(fresh.state_dict()))
        np.testing.assert_array_equal(loaded.ask(), fresh.ask(), err_msg=name)


def test_cmaes_draws_from_its_own_generator_not_numpy_global_one():
    """cma seeds and samples numpy's global generator by default; ours does not, so another user of
    np.random between two generations cannot change what a replayed CMA-ES asks for."""
    first, second = _cmaes(0), _cmaes(0)
    for index in range(3):
        np.random.seed(index)
        genomes = first.ask()
        np.random.seed(1000 + index)
        np.testing.assert_array_equal(second.ask(), genomes)
        first.tell(genomes, SPHERE.evaluate(genomes))
        second.tell(genomes, SPHERE.evaluate(genomes))


def test_nsga2_takes_its_operators_as_parameters():
    """Integer genomes with a uniform crossover and a reset mutation, duplicates judged on the
    first half only: everything asked for is what those operators can produce."""
    from functools import partial

    from lamarckian_hpc.ec.operators import uniform_crossover

    def reset(genomes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        changed = genomes.copy()
        changed[np.arange(len(changed)), rng.integers(0, changed.shape[1], len(changed))] = rng.integers(0, 5, len(changed))
        return changed

    algorithm = NSGA2(np.zeros(6), np.full(6, 4.0), 8, np.random.default_rng(0),
                      sampling=lambda rng, count: rng.integers(0, 5, (count, 6)).astype(float),
                      crossover=partial(uniform_crossover, probability=0.9), mutation=reset,
                      duplicate_key=lambda genomes: genomes[:, :3])
    for _ in range(5):
        genomes = algorithm.ask()
        assert (genomes == np.round(genomes)).all() and ((genomes >= 0) & (genomes <= 4)).all()
        algorithm.tell(genomes, np.column_stack([genomes.sum(axis=1), -genomes[:, 0]]))
    assert algorithm.ask(count=3).shape == (3, 6) and algorithm.asked_parent_ids.shape == (3, 2)


def test_nsga2_rescores_its_population_when_told_new_objectives():
    algorithm = NSGA2(np.zeros(2), np.ones(2), 4, np.random.default_rng(0))
    genomes = algorithm.ask()
    algorithm.tell(genomes, np.column_stack([np.arange(4.0), -np.arange(4.0)]))
    first_ids = algorithm.ids.copy()
    offspring = algorithm.ask()
    # the members now score worst on both objectives, the offspring best: only offspring survive
    algorithm.tell(offspring, np.zeros((4, 2)), population_objectives=np.full((4, 2), 10.0))
    assert not set(algorithm.ids.tolist()) & set(first_ids.tolist())
