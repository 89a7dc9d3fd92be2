"""`evolve --resume`: a run killed mid-way and resumed ends with exactly the population history of a
run that was never interrupted (same seed), with every generation once."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from lamarckian_hpc.storage import open_run

ROOT = Path(__file__).resolve().parents[1]
COMMON = ["runtime.mode=serial", "algorithm.population_size=20", "algorithm.generations=40",
          "storage.checkpoint_interval_seconds=0.001"]


def _evolve(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "lamarckian_hpc", "evolve", *args], cwd=cwd, capture_output=True,
                            text=True, timeout=300)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def _history(path: Path) -> dict[str, np.ndarray]:
    with open_run(path) as reader:
        assert reader.closed_cleanly
        return reader.population()


@pytest.mark.second_pass
def test_killed_evolution_resumes_to_the_same_history_as_an_uninterrupted_run(tmp_path):
    config = str(ROOT / "configs" / "nsga2_zdt1.yaml")
    _evolve(tmp_path, config, *COMMON, "storage.run_name=straight")
    straight = _history(tmp_path / "runs" / "straight.h5")

    run = tmp_path / "runs" / "killed.h5"
    process = subprocess.Popen([sys.executable, "-m", "lamarckian_hpc", "evolve", config, *COMMON,
                                "storage.run_name=killed", "problem.evaluation_delay_seconds=0.005"],
                               cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert time.monotonic() < deadline and process.poll() is None, "the run ended before it was killed"
            try:
                with open_run(run) as reader:
                    if len(reader.population().get("generation", [])) >= 10 * 20:
                        break
            except OSError:  # not created yet, or still being set up by its writer
                pass
            time.sleep(0.1)
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)

    resumed = _evolve(tmp_path, "--resume", str(run), "problem.evaluation_delay_seconds=0")
    assert "resumed after generation" in resumed.stdout
    history = _history(run)
    for column in ("generation", "id", "parent_ids", "genome", "objectives"):
        np.testing.assert_array_equal(history[column], straight[column], err_msg=column)
    with open_run(run) as reader:
        assert reader.meta["resumes"] == 1
        np.testing.assert_array_equal(np.unique(reader.metric("hypervolume").policy_version), np.arange(40))


@pytest.fixture(scope="module")
def short_run(tmp_path_factory) -> Path:
    """The folder of a finished 5-generation NSGA-II run (`short.h5` and its state), made once."""
    folder = tmp_path_factory.mktemp("short")
    _evolve(folder, str(ROOT / "configs" / "nsga2_zdt1.yaml"), *COMMON, "algorithm.generations=5",
            "storage.run_name=short")
    return folder / "runs"


@pytest.mark.parametrize("overrides, words", [
    (["algorithm.population_size=10", "algorithm.generations=9"], "algorithm.population_size is 10"),
    (["problem.num_variables=12", "algorithm.generations=9"], "have 30 variables, this problem's 12"),
    (["algorithm.generations=5"], "nothing left to do"),
])
def test_a_run_the_config_does_not_fit_is_refused_in_one_line(short_run, tmp_path, overrides, words):
    shutil.copytree(short_run, tmp_path / "runs")  # each refusal is tried on a copy of the same run
    refused = _evolve(tmp_path, "--resume", str(tmp_path / "runs" / "short.h5"), *overrides, check=False)
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert refused.returncode == 2 and len(lines) == 1 and words in lines[0], refused.stderr


@pytest.mark.second_pass
@pytest.mark.parametrize("config, overrides", [
    ("ga_tsp.yaml", ["algorithm.population_size=12", "algorithm.offspring_per_step=4"]),
    ("ga_rastrigin.yaml", ["algorithm.population_size=10", "algorithm.variant=steady_state"]),
    ("es_sphere.yaml", ["algorithm.population_size=10"]),
    ("cmaes_rastrigin.yaml", ["algorithm.population_size=8"]),
    ("balance.yaml", ["algorithm.population_size=8"]),
])
def test_every_evolve_algorithm_resumes_to_the_history_of_a_straight_run(tmp_path, config, overrides):
    """Stopped after 3 generations and resumed to 6 on the one population workflow, each algorithm
    writes exactly the rows a straight 6-generation run writes (its state, not a replay, carries over)."""
    common = [str(ROOT / "configs" / config), "runtime.mode=serial", *overrides]
    _evolve(tmp_path, *common, "algorithm.generations=6", "storage.run_name=straight")
    _evolve(tmp_path, *common, "algorithm.generations=3", "storage.run_name=resumed")
    resumed = _evolve(tmp_path, "--resume", str(tmp_path / "runs" / "resumed.h5"), "algorithm.generations=6")
    # Generations count from 0, as in the run file: the last one saved before the stop is 2.
    assert re.search(r"resumed after generation\W+2\b", resumed.stdout), resumed.stdout
    assert "after generation 2" in resumed.stderr, resumed.stderr
    straight, history = _history(tmp_path / "runs" / "straight.h5"), _history(tmp_path / "runs" / "resumed.h5")
    for column in ("generation", "id", "parent_ids", "genome", "objectives"):
        np.testing.assert_array_equal(history[column], straight[column], err_msg=column)
