"""Run files for the analysis tests, each made once per test session by the real commands: serial
PPO on CartPole (`train`), NSGA-II on ZDT1, a tiny PBT+PPO run and a tiny EMOGI run (`evolve`), a
league on biased rock-paper-scissors (the league trainer behind benchmarks/reproduce.py), and a
few distributed-looking training runs written with the real RunWriter, so that scaling and
staleness have several core and host counts without starting Ray in a unit test.

A test module uses them by importing the fixtures it needs: `from analysis_runs import ppo_path`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lamarckian_hpc.cli import main
from lamarckian_hpc.storage import RunWriter

ROOT = Path(__file__).resolve().parents[1]
STALENESS_BINS = [f"staleness_count_{k}" for k in range(8)] + ["staleness_count_8plus"]
#: The RunWriter-made runs: (name, actors, broadcast, how it names its hosts, hosts).
WRITTEN_RUNS = (("flat_2actors", 2, "flat", "meta", 2), ("flat_4actors", 4, "flat", "meta", 4),
                ("tree_4actors", 4, "tree", "simulated_nodes", 4))


@pytest.fixture(scope="session")
def runs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("runs")


@pytest.fixture(scope="session")
def ppo_path(runs_dir: Path) -> Path:
    status = main(["train", str(ROOT / "configs/ppo_cartpole.yaml"), "runtime.mode=serial",
                   "stop.total_env_steps=3072", f"storage.directory={runs_dir}", "storage.run_name=ppo_serial"])
    assert status == 0
    return runs_dir / "ppo_serial.h5"


@pytest.fixture(scope="session")
def nsga2_path(runs_dir: Path) -> Path:
    status = main(["evolve", str(ROOT / "configs/nsga2_zdt1.yaml"), "runtime.mode=serial", "algorithm.generations=12",
                   "algorithm.population_size=24", f"storage.directory={runs_dir}", "storage.run_name=nsga2_zdt1"])
    assert status == 0
    return runs_dir / "nsga2_zdt1.h5"


@pytest.fixture(scope="session")
def pbt_path(runs_dir: Path) -> Path:
    status = main(["evolve", str(ROOT / "configs/pbt_ppo_cartpole.yaml"), "runtime.mode=serial",
                   "algorithm.population_size=2", "algorithm.interval_env_frames=256", "stop.total_env_frames=768",
                   "ppo.num_epochs=2", f"storage.directory={runs_dir}", "storage.run_name=pbt_tiny"])
    assert status == 0
    return runs_dir / "pbt_tiny.h5"


@pytest.fixture(scope="session")
def emogi_path(runs_dir: Path) -> Path:
    """Two generations of two Pong policies, as tests/test_emogi.py runs it."""
    overrides = [f"{key}={value}" for key, value in {
        "env.num_envs": 2, "env.kwargs": "{points_to_win: 2}", "model.policy_hidden_sizes": "[16]",
        "ppo.batch_size": 256, "ppo.num_epochs": 1, "algorithm.population_size": 2, "algorithm.generations": 2,
        "algorithm.initial_env_frames": 256, "algorithm.offspring_env_frames": 256,
        "algorithm.evaluation_episodes": 1, "runtime.mode": "serial", "storage.directory": str(runs_dir),
        "storage.run_name": "emogi_pong"}.items()]
    assert main(["evolve", str(ROOT / "configs/emogi_pong.yaml"), *overrides]) == 0
    return runs_dir / "emogi_pong.h5"


@pytest.fixture(scope="session")
def league_path(runs_dir: Path) -> Path:
    """A real league run: the league's matrix-game trainer on biased rock-paper-scissors."""
    path = runs_dir / "league_rps.h5"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "reproduce.py"), "--league-run", str(path),
                    "--updates", "200"], check=True, timeout=300)
    return path


def write_training_run(path: Path, actors: int, broadcast: str, hosts_from: str, hosts: int) -> None:
    """A run file as a distributed PPO run lays it out: its config and /meta name the actors and
    hosts, and each of 6 updates writes throughput, staleness and the staleness histogram."""
    runtime = {"mode": "ray", "num_actors": actors, "broadcast": broadcast}
    meta: dict = {"hosts": ["localhost"]}
    if hosts_from == "simulated_nodes":
        runtime["simulated_nodes"] = hosts
    else:
        names = [f"node{k}" for k in range(hosts)]
        meta = {"hosts": names, "actors_per_node": {name: actors // hosts for name in names},
                "broadcast_layout": broadcast}
    config = {"algorithm": {"name": "ppo"}, "env": {"id": "CartPole-v1"}, "runtime": runtime}
    names = ["env_frames_per_second", "trained_frames_per_second", "staleness_mean", "staleness_max", *STALENESS_BINS]
    rng = np.random.default_rng(actors * 10 + hosts)
    with RunWriter(path, config, names, meta=meta) as writer:
        for update in range(6):
            counts = rng.multinomial(256, np.r_[np.full(4, 1.0), np.full(5, 0.25 if broadcast == "flat" else 0.0)]
                                     / (4 + (1.25 if broadcast == "flat" else 0.0)))
            staleness = np.repeat(np.arange(9), counts)
            writer.append_many({"env_frames_per_second": 5000.0 * actors * (1 + 0.1 * update),
                                "trained_frames_per_second": 900.0 * actors, "staleness_mean": float(staleness.mean()),
                                "staleness_max": float(staleness.max()),
                                **{name: float(count) for name, count in zip(STALENESS_BINS, counts)}},
                               env_frames=256 * (update + 1), policy_version=update + 1, wall_time=0.5 * (update + 1))
            writer.flush()


@pytest.fixture(scope="session")
def written_paths(runs_dir: Path) -> dict[str, Path]:
    paths = {}
    for name, actors, broadcast, hosts_from, hosts in WRITTEN_RUNS:
        paths[name] = runs_dir / f"{name}.h5"
        write_training_run(paths[name], actors, broadcast, hosts_from, hosts)
    return paths
