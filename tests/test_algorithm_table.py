"""The tables of algorithms name parts that exist: every entry point of an RL entry imports and is
callable, and every EC entry builds its algorithm, so a misspelt path fails here rather than in
the middle of a run that names the algorithm."""

from __future__ import annotations

import pytest

from lamarckian_hpc.config import ALGORITHMS, EvolveConfig, load_config
from lamarckian_hpc.config.evolve import EVOLVE_ALGORITHMS
from lamarckian_hpc.population.evolve_components import EC_ALGORITHMS, make_algorithm, make_problem
from lamarckian_hpc.runtime.algorithms import RL_ALGORITHMS, load

PARTS = ("learner", "model", "torch_policy", "numpy_policy", "actor_gradients", "greedy")
EC_PROBLEMS = {"nsga2": "zdt1", "ga": "rastrigin", "es": "sphere", "cmaes": "sphere"}


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_rl_entry_names_parts_that_import(name: str):
    entry = RL_ALGORITHMS[name]
    assert entry.config is ALGORITHMS[name]
    for part in PARTS:
        if (path := getattr(entry, part)) is not None:
            assert callable(load(path)), f"{name}.{part}: {path}"
    assert len(set(entry.metric_names)) == len(entry.metric_names)


@pytest.mark.parametrize("name", sorted(EVOLVE_ALGORITHMS))
def test_every_ec_entry_builds_its_algorithm(name: str):
    config = load_config(None, [f"algorithm.name={name}", f"problem.name={EC_PROBLEMS[name]}"], model=EvolveConfig)
    algorithm = make_algorithm(config, make_problem(config))  # a problem is its own evaluator
    assert EC_ALGORITHMS[name].config is EVOLVE_ALGORITHMS[name]
    assert len(algorithm.ask()) > 0
