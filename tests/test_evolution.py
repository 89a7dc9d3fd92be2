"""Evolution on the population workflow: serial, forked and Ray workers give the same population for
a fixed seed (NSGA-II and both GA variants), failed or slow evaluations do not stop a generation,
`evolve` records every generation of NSGA-II and GA runs, and mismatched configs are one-line errors."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from local_ray import local_ray

from lamarckian_hpc.config import ConfigError, EvolveConfig, load_config
from lamarckian_hpc.ec import Problem
from lamarckian_hpc.population.evolution import Evaluations, EvaluatorHost, evolve
from lamarckian_hpc.population.evolve_components import make_problem
from lamarckian_hpc.population.worker_pool import Request, make_pool
from lamarckian_hpc.storage import open_run

ray = pytest.importorskip("ray")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def module_ray():
    with local_ray():
        yield


def _config(*overrides: str) -> EvolveConfig:
    return load_config(None, ["algorithm.population_size=20", "algorithm.generations=5", *overrides], EvolveConfig)


def test_serial_forked_and_ray_evaluation_give_the_same_population(module_ray):
    serial = evolve(_config("runtime.mode=serial"))
    for mode in ("fork", "ray"):
        distributed = evolve(_config(f"runtime.mode={mode}", "runtime.num_workers=2"))
        np.testing.assert_array_equal(serial.genomes, distributed.genomes, err_msg=mode)
        np.testing.assert_array_equal(serial.objectives, distributed.objectives, err_msg=mode)


@pytest.mark.second_pass  # over 15 s on two cores
def test_failed_and_slow_evaluations_do_not_stop_a_generation(module_ray):
    def flaky(X: np.ndarray) -> np.ndarray:
        import time

        if X[0, 0] < 0.2:
            raise RuntimeError("this evaluation crashes")
        if X[0, 0] > 0.9:
            time.sleep(30)  # far beyond the timeout below
        return np.column_stack([X[:, 0], 1 - X[:, 0]])

    problem = Problem("flaky", 3, 2, np.zeros(3), np.ones(3), flaky)
    genomes = np.random.default_rng(0).random((12, 3))
    genomes[:, 0] = np.linspace(0.3, 0.8, 12)  # healthy: one worker stays free for them
    genomes[0, 0], genomes[1, 0], genomes[2, 0] = 0.1, 0.95, 0.5
    pool = make_pool("ray", lambda slots: EvaluatorHost(problem, 0.0, slots), 0, 2, 5.0)
    try:
        answers: list = [None] * len(genomes)
        for index, answer in pool.run([Request("evaluate", (genome,)) for genome in genomes]):
            answers[index] = answer
        assert pool.replacements == 1  # the worker that hung was replaced; the other one stayed
    finally:
        pool.close()
    evaluations = Evaluations.of(answers, 2)
    assert np.isinf(evaluations.objectives[0]).all()  # failed
    assert np.isinf(evaluations.objectives[1]).all()  # timed out
    assert evaluations.failures == 2
    np.testing.assert_allclose(evaluations.objectives[2], [0.5, 0.5])
    healthy = (genomes[:, 0] >= 0.2) & (genomes[:, 0] <= 0.9)
    assert np.isfinite(evaluations.objectives[healthy]).all()


def test_evolve_command_records_every_generation(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "lamarckian_hpc", "evolve", str(ROOT / "configs" / "nsga2_zdt1.yaml"),
         "runtime.mode=serial", "algorithm.population_size=20", "algorithm.generations=6",
         f"storage.directory={tmp_path}", "storage.run_name=evo"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == str(tmp_path / "evo.h5")
    with open_run(tmp_path / "evo.h5") as run:
        assert run.closed_cleanly
        population = run.population()
        assert len(population["id"]) == 20 * 6
        assert sorted(set(population["generation"].tolist())) == list(range(6))
        assert len(set(population["id"].tolist())) == 120  # every individual once
        assert population["genome"].shape == (120, 30) and population["objectives"].shape == (120, 2)
        later = population["generation"] > 0
        parents = population["parent_ids"][later].ravel()
        assert set(parents.tolist()) <= set(population["id"][population["generation"] < 5].tolist())
        assert (population["parent_ids"][~later] == -1).all()
        assert len(run.metric("hypervolume")) == 6


def test_bad_evolve_config_is_one_line(tmp_path):
    result = subprocess.run([sys.executable, "-m", "lamarckian_hpc", "evolve", str(ROOT / "configs" / "nsga2_zdt1.yaml"),
                             "algorithm.population_size=7"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "algorithm" in lines[0] and "even" in lines[0]


def _ga_config(*overrides: str) -> EvolveConfig:
    return load_config(ROOT / "configs" / "ga_tsp.yaml", ["algorithm.population_size=16", "algorithm.generations=6",
                                                          "algorithm.offspring_per_step=6", *overrides], EvolveConfig)


@pytest.mark.parametrize("variant", ["generational", "steady_state"])
def test_ga_gives_the_same_population_serially_and_on_ray(module_ray, variant):
    serial = evolve(_ga_config(f"algorithm.variant={variant}", "runtime.mode=serial"))
    distributed = evolve(_ga_config(f"algorithm.variant={variant}", "runtime.mode=ray", "runtime.num_workers=2"))
    problem = make_problem(_ga_config())
    np.testing.assert_array_equal(serial.genomes, distributed.genomes)
    np.testing.assert_array_equal(serial.ids, distributed.ids)
    assert problem.coding.valid(distributed.genomes).all()


def _evolve_cli(tmp_path: Path, config: str, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lamarckian_hpc", "evolve", str(ROOT / "configs" / config),
                           f"storage.directory={tmp_path}", "storage.run_name=ga", *overrides],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)


def _check_ga_history(path: Path, problem: Problem, rows_per_generation: list[int]) -> dict[str, np.ndarray]:
    with open_run(path) as run:
        assert run.closed_cleanly
        population = run.population()
        best = run.metric("best_objective")
    generations = population["generation"]
    assert np.bincount(generations).tolist() == rows_per_generation
    assert len(set(population["id"].tolist())) == sum(rows_per_generation)  # every individual once
    for generation in range(1, len(rows_per_generation)):  # parents were born in an earlier generation
        earlier = set(population["id"][generations < generation].tolist())
        assert set(population["parent_ids"][generations == generation].ravel().tolist()) <= earlier
    assert (population["parent_ids"][generations == 0] == -1).all()
    assert problem.coding.valid(population["genome"]).all()
    np.testing.assert_allclose(population["objectives"], problem.evaluate(population["genome"]))  # genomes round-trip
    assert (population["worker"] > 0).all() and (population["wall_time"] >= 0).all()
    assert len(best) == len(rows_per_generation)
    assert best.value[-1] == population["objectives"].min()  # the best is never lost
    assert best.env_frames[-1] == sum(rows_per_generation)  # evaluations so far
    return population


def test_ga_on_a_permutation_problem_records_every_generation(tmp_path):
    result = _evolve_cli(tmp_path, "ga_tsp.yaml", "runtime.mode=serial", "algorithm.population_size=20",
                         "algorithm.generations=5", "algorithm.offspring_per_step=4")
    assert result.returncode == 0, result.stderr
    assert "best objective" in result.stdout
    _check_ga_history(tmp_path / "ga.h5", make_problem(_ga_config()), [20, 4, 4, 4, 4])


@pytest.mark.second_pass  # over 15 s on two cores
def test_ga_on_ray_records_every_generation(module_ray, tmp_path):
    address = ray.get_runtime_context().gcs_address  # join the tests' Ray instead of starting another
    result = _evolve_cli(tmp_path, "ga_rastrigin.yaml", "runtime.mode=ray", f"runtime.ray_address={address}",
                         "algorithm.population_size=10", "algorithm.generations=3", "algorithm.elite_count=2")
    assert result.returncode == 0, result.stderr
    config = load_config(ROOT / "configs" / "ga_rastrigin.yaml", [], EvolveConfig)
    population = _check_ga_history(tmp_path / "ga.h5", make_problem(config), [10, 8, 8])
    assert population["genome"].shape == (26, 10)


def test_unknown_algorithm_name_is_one_line_naming_the_allowed_ones(tmp_path):
    result = _evolve_cli(tmp_path, "ga_rastrigin.yaml", "algorithm.name=simulated_annealing")
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert "algorithm" in lines[0] and "'simulated_annealing'" in lines[0] and "nsga2, ga" in lines[0]


@pytest.mark.parametrize("overrides, message", [
    (["algorithm.name=ga"], "algorithm ga needs a single-objective problem (sphere, rastrigin, onemax, tsp)"),
    (["problem.name=sphere"], "algorithm nsga2 needs a multi-objective problem"),
    (["algorithm.name=ga", "problem.name=tsp", "algorithm.crossover=sbx"], "sbx does not fit problem tsp "
                                                                            "(permutation coding); use one of order"),
    (["algorithm.name=ga", "problem.name=onemax", "algorithm.mutation=swap"], "use one of bit_flip"),
    (["algorithm.name=ga", "problem.name=sphere", "algorithm.elite_count=100"], "elite_count (100) must be below"),
    (["algorithm.name=ga", "problem.name=sphere", "algorithm.variant=island"], "algorithm.variant"),
    (["problem.name=dtlz2", "problem.num_variables=2"], "at least num_objectives (3)"),
    (["problem.num_objectives=4"], "num_objectives applies to dtlz problems only"),
])
def test_evolve_config_mismatches_are_reported(overrides, message):
    with pytest.raises(ConfigError, match=re.escape(message)) as error:
        load_config(None, overrides, EvolveConfig)
    assert "\n" not in str(error.value)


def test_config_tables_match_the_ec_package():
    from lamarckian_hpc.config import evolve as evolve_config
    from lamarckian_hpc.ec import variation

    assert evolve_config.CROSSOVER_CODINGS == variation.CROSSOVER_CODINGS
    assert evolve_config.MUTATION_CODINGS == variation.MUTATION_CODINGS
    for name in evolve_config.MULTI_OBJECTIVE_PROBLEMS + evolve_config.SINGLE_OBJECTIVE_PROBLEMS:
        config = load_config(None, [f"problem.name={name}", "algorithm.name="
                                    + ("ga" if name in evolve_config.SINGLE_OBJECTIVE_PROBLEMS else "nsga2")],
                             EvolveConfig)
        problem = make_problem(config)
        assert problem.coding.kind == config.problem.coding
        assert (problem.num_objectives == 1) == (name in evolve_config.SINGLE_OBJECTIVE_PROBLEMS)
