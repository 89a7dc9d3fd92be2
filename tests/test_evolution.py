"""The evolution driver: serial and Ray evaluation give the same population for a fixed seed,
failed or slow evaluations do not stop a generation, and `evolve` records every generation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lamarckian_hpc.config import load_config, EvolveConfig
from lamarckian_hpc.ec import Problem
from lamarckian_hpc.runtime.evolution import RayEvaluator, SerialEvaluator, evolve, make_problem
from lamarckian_hpc.storage import open_run

ray = pytest.importorskip("ray")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 1024 * 1024, logging_level="ERROR")
    yield
    ray.shutdown()


def _config(*overrides: str) -> EvolveConfig:
    return load_config(None, ["algorithm.population_size=20", "algorithm.generations=5", *overrides], EvolveConfig)


def test_serial_and_ray_evaluation_give_the_same_population(local_ray):
    config = _config()
    problem = make_problem(config)
    serial = evolve(config, SerialEvaluator(problem))
    distributed = evolve(config, RayEvaluator(problem, config))
    np.testing.assert_array_equal(serial.genomes, distributed.genomes)
    np.testing.assert_array_equal(serial.objectives, distributed.objectives)


def test_failed_and_slow_evaluations_do_not_stop_a_generation(local_ray):
    def flaky(X: np.ndarray) -> np.ndarray:
        import time

        if X[0, 0] < 0.2:
            raise RuntimeError("this evaluation crashes")
        if X[0, 0] > 0.9:
            time.sleep(30)  # far beyond the timeout below
        return np.column_stack([X[:, 0], 1 - X[:, 0]])

    problem = Problem("flaky", 3, 2, np.zeros(3), np.ones(3), flaky)
    config = _config("runtime.evaluation_timeout_seconds=5")
    genomes = np.random.default_rng(0).random((12, 3))
    genomes[:, 0] = np.linspace(0.3, 0.8, 12)  # healthy: one worker stays free for them
    genomes[0, 0], genomes[1, 0], genomes[2, 0] = 0.1, 0.95, 0.5
    evaluations = RayEvaluator(problem, config).evaluate(genomes)
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
