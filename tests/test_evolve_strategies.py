"""The evolution strategies in `lamarckian-hpc evolve` (`algorithm.name: es` and `cmaes`): the
config accepts them on single-objective real-coded problems only, with a message naming the
field and the allowed values otherwise; `make_algorithm` builds them from a sampled mean; each
learns within a fixed budget and seed, far beyond random search with the same evaluations; and a
state that went through msgpack continues exactly. The algorithms are driven by ask/tell loops
here, as the population workflow drives them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ask_tell_lockstep import assert_lockstep
from plain_state import through_msgpack

from lamarckian_hpc.config import ConfigError, load_config
from lamarckian_hpc.config.evolve import EvolveConfig
from lamarckian_hpc.ec import OpenAIES
from lamarckian_hpc.population.evolve_components import make_algorithm, make_problem

ROOT = Path(__file__).resolve().parents[1]


def _config(**sections) -> EvolveConfig:
    return EvolveConfig.model_validate({"seed": 0, **sections})


def _run(config: EvolveConfig, generations: int | None = None) -> tuple[object, float, int]:
    """The algorithm after `generations` ask/tell rounds, its best objective and the evaluations spent."""
    problem = make_problem(config)
    algorithm = make_algorithm(config, problem)
    best, evaluations = np.inf, 0
    for _ in range(generations or config.algorithm.generations):
        genomes = algorithm.ask()
        objectives = problem.evaluate(genomes)
        algorithm.tell(genomes, objectives)
        best, evaluations = min(best, float(objectives.min())), evaluations + len(genomes)
    return algorithm, best, evaluations


def _random_search(config: EvolveConfig, evaluations: int) -> float:
    problem = make_problem(config)
    return float(problem.evaluate(problem.initialize(np.random.default_rng(0), evaluations)).min())


def test_es_learns_the_sphere_from_its_example_config():
    config = load_config(ROOT / "configs" / "es_sphere.yaml", [], EvolveConfig)
    algorithm, best, evaluations = _run(config)
    assert isinstance(algorithm, OpenAIES) and evaluations == 10_000
    random_best = _random_search(config, evaluations)
    print(f"es on sphere: best {best:.4g} in {evaluations} evaluations; random search {random_best:.4g}")
    assert best < 0.05 and random_best > 5.0  # measured 0.0082 against 12.3


def test_cmaes_learns_rastrigin_from_its_example_config():
    config = load_config(ROOT / "configs" / "cmaes_rastrigin.yaml", [], EvolveConfig)
    algorithm, best, evaluations = _run(config)
    assert type(algorithm).__name__ == "CMAES" and evaluations == 10_000
    random_best = _random_search(config, evaluations)
    print(f"cmaes on rastrigin: best {best:.4g} in {evaluations} evaluations; random search {random_best:.4g}")
    assert best < 15.0 and random_best > 40.0  # measured 3.98 against 68.3


def test_cmaes_with_its_default_population_solves_the_sphere():
    config = _config(problem={"name": "sphere"}, algorithm={"name": "cmaes", "generations": 150})
    algorithm, best, evaluations = _run(config)
    assert algorithm.population_size == 10 and evaluations == 1500  # cma's 4 + floor(3 ln 10)
    assert best < 1e-6


@pytest.mark.parametrize("name", ["es", "cmaes"])
def test_the_mean_starts_at_a_sample_or_at_the_centre(name):
    sampled = make_algorithm(_config(problem={"name": "sphere"}, algorithm={"name": name}),
                             make_problem(_config(problem={"name": "sphere"}, algorithm={"name": name})))
    centred_config = _config(problem={"name": "sphere"}, algorithm={"name": name, "initial_mean": "center"})
    centred = make_algorithm(centred_config, make_problem(centred_config))
    mean = sampled.mean if name == "es" else sampled.initial_mean
    assert np.abs(mean).max() <= 5.12 and np.abs(mean).min() > 0  # drawn within the bounds, not the centre
    np.testing.assert_array_equal(centred.mean if name == "es" else centred.initial_mean, np.zeros(10))


@pytest.mark.parametrize("name", ["es", "cmaes"])
def test_a_state_from_make_algorithm_continues_exactly(name):
    config = _config(problem={"name": "rastrigin", "num_variables": 5},
                     algorithm={"name": name, "population_size": 8, "generations": 12})
    original, _, _ = _run(config, generations=6)
    problem = make_problem(config)
    loaded = make_algorithm(config, problem)
    loaded.load_state_dict(through_msgpack(original.state_dict()))
    assert_lockstep(original, loaded, problem, generations=6)
    np.testing.assert_array_equal(loaded.population.genomes, original.population.genomes)


@pytest.mark.parametrize("name", ["es", "cmaes"])
@pytest.mark.parametrize("problem", ["zdt1", "onemax", "tsp", "balance"])
def test_other_problems_are_refused_naming_the_field_and_the_allowed_values(tmp_path, name, problem):
    path = tmp_path / "config.yaml"
    path.write_text(f"problem:\n  name: {problem}\nalgorithm:\n  name: {name}\n")
    with pytest.raises(ConfigError) as raised:
        load_config(path, [], EvolveConfig)
    message = str(raised.value)
    assert "problem.name" in message and "sphere, rastrigin" in message and problem in message


def test_an_odd_es_population_is_refused():
    with pytest.raises(ConfigError, match="even"):
        load_config(ROOT / "configs" / "es_sphere.yaml", ["algorithm.population_size=7"], EvolveConfig)
