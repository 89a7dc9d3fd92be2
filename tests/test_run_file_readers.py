"""Run files open in the HDF5 libraries users have, not only the one h5py bundles: the package
writes the 1.10 file format (`storage.FILE_FORMAT`), and every kind of run file is read in full by
Debian's `h5dump` (HDF5 1.10) and by an h5py built on HDF5 1.12, in a virtual environment of its
own (its python named by LAMARCKIAN_HPC_OLDER_H5PY_PYTHON). CI's step 3 installs both (.ci/run);
elsewhere these tests skip, and fail instead where LAMARCKIAN_HPC_REQUIRE_HDF5_READERS=1.

The runs are real cut-down runs of the shipped configs, each with recorded episodes where the
workload records them (gzip-compressed and boolean datasets, the ones the newest format breaks):
`train` PPO, `evaluate --record`, PBT+PPO, a league, NSGA-II, and EMOGI (whose `/emogi` group is
added to the closed file).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from optional_parts import skip_unless_required
from read_hdf5_in_full import read_in_full

import lamarckian_hpc
from lamarckian_hpc.storage import RunWriter
from lamarckian_hpc.storage.trajectories import EpisodeRecord, TrajectorySpec

ROOT = Path(__file__).resolve().parents[1]
READER = Path(__file__).with_name("read_hdf5_in_full.py")
OLDER_H5PY = "LAMARCKIAN_HPC_OLDER_H5PY_PYTHON"
PART = "hdf5_readers"
#: Each kind of run: config and overrides, as small as the workload allows.
RUNS: dict[str, tuple[str, list[str]]] = {
    "train": ("ppo_cartpole.yaml", ["runtime.mode=serial", "stop.total_env_steps=2048",
                                    "storage.trajectories.every_episodes=1"]),
    "pbt": ("pbt_ppo_cartpole.yaml", ["runtime.mode=serial", "algorithm.population_size=2",
                                      "algorithm.interval_env_frames=256", "stop.total_env_frames=768",
                                      "ppo.num_epochs=1", "stop.target_return=null",
                                      "storage.trajectories.every_episodes=1"]),
    "league": ("league_pong.yaml", ["runtime.mode=serial", "env.num_envs=2", "env.kwargs.points_to_win=1",
                                    "ppo.batch_size=128", "ppo.num_minibatches=2", "ppo.num_epochs=1",
                                    "model.policy_hidden_sizes=[16]", "league.snapshot_interval=1",
                                    "algorithm.generations=2", "algorithm.scripted_evaluation_interval=0",
                                    "storage.trajectories.every_episodes=2"]),
    "nsga2": ("nsga2_zdt1.yaml", ["runtime.mode=serial", "algorithm.generations=3", "algorithm.population_size=8"]),
    "emogi": ("emogi_pong.yaml", ["runtime.mode=serial", "env.num_envs=2", "env.kwargs.points_to_win=1",
                                  "model.policy_hidden_sizes=[16]", "ppo.batch_size=128", "ppo.num_minibatches=2",
                                  "ppo.num_epochs=1", "algorithm.population_size=2", "algorithm.generations=2",
                                  "algorithm.initial_env_frames=128", "algorithm.offspring_env_frames=128",
                                  "algorithm.evaluation_episodes=1", "storage.trajectories.every_episodes=1"]),
}


@pytest.fixture(scope="module")
def h5dump() -> str:
    """Module-scoped, and named before `runs`: a missing reader skips before the runs are made."""
    path = shutil.which("h5dump")
    if path is None:
        skip_unless_required(PART, "h5dump is not installed (apt-get install hdf5-tools: HDF5 1.10 on Debian 12)")
    return path


@pytest.fixture(scope="module")
def older_h5py() -> str:
    python = os.environ.get(OLDER_H5PY, "")
    if not python or not os.access(python, os.X_OK):
        skip_unless_required(PART, f"{OLDER_H5PY} names no python with an older h5py (.ci/run step 3 makes one: "
                                   "h5py 3.9.0, HDF5 1.12.2)")
    return python


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One run file of each kind, and the episodes `evaluate --record` writes from the train run."""
    folder = tmp_path_factory.mktemp("every_kind")
    paths = {kind: lamarckian_hpc.run(ROOT / "configs" / config, overrides, output=folder / f"{kind}.h5").path
             for kind, (config, overrides) in RUNS.items()}
    paths["evaluate_record"] = folder / "evaluate_record.h5"
    lamarckian_hpc.evaluate(paths["train"], episodes=1, record=paths["evaluate_record"])
    _kinds_present(paths)
    return paths


def _kinds_present(paths: dict[str, Path]) -> None:
    """The runs hold what makes old readers fail: gzip-compressed and boolean recorded steps."""
    import h5py

    for kind in ("train", "pbt", "league", "emogi", "evaluate_record"):
        with h5py.File(paths[kind], "r", swmr=True) as file:
            steps = next(iter(file["trajectories"].values()))
            assert steps["observations"].compression == "gzip" and steps["terminated"].dtype == bool, kind
    with h5py.File(paths["emogi"], "r") as file:
        assert "emogi/policies" in file


def test_every_kind_of_run_file_is_dumped_whole_by_h5dump_of_hdf5_1_10(h5dump: str, runs: dict[str, Path]) -> None:
    _kinds_present(runs)
    failures = {}
    for kind, path in runs.items():
        done = subprocess.run([h5dump, str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              timeout=120)
        if done.returncode != 0 or done.stderr.strip():
            failures[kind] = done.stderr.strip().splitlines()[:3]
    assert failures == {}


def test_every_kind_of_run_file_is_read_whole_by_h5py_on_hdf5_1_12(older_h5py: str, runs: dict[str, Path]) -> None:
    done = subprocess.run([older_h5py, str(READER), *map(str, runs.values())], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    older = json.loads(done.stdout)
    assert older["hdf5_version"].split(".")[:2] < ["1", "13"], older["hdf5_version"]  # an older HDF5 than ours
    for kind, path in runs.items():
        ours = read_in_full(str(path))  # the same reader on the h5py that wrote the file
        assert older["files"][str(path)] == ours, kind
        assert ours["datasets"] > 5 and ours["attributes"] > 5, kind


def test_a_run_file_is_read_by_h5py_on_hdf5_1_12_while_its_writer_has_it_open(older_h5py: str, tmp_path: Path) -> None:
    """SWMR still works in the 1.10 format: the older h5py reads the file between flushes, every
    flushed row and recorded episode (gzip and bool datasets) in full."""
    path = tmp_path / "open.h5"

    def episode(number: int) -> EpisodeRecord:
        length = 5 + number
        return EpisodeRecord("main", "0", np.full((length, 4), number, np.float32), np.zeros(length, np.int64),
                             np.ones(length, np.float32), np.zeros(length, np.int64), True, number, float(length),
                             0, "node1", 100 * (number + 1), float(number))

    def read() -> dict:
        done = subprocess.run([older_h5py, str(READER), str(path)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout)["files"][str(path)]

    with RunWriter(path, {"env": {"id": "CartPole-v1"}}, ["episode_return_mean"],
                   trajectories=[TrajectorySpec("main", (4,), "float32")]) as writer:
        seen = []
        for number in range(2):
            writer.append("episode_return_mean", float(number), env_frames=100 * (number + 1), policy_version=number)
            writer.append_episode(episode(number))
            writer.flush()
            seen.append(read())
            assert seen[-1]["elements"] == read_in_full(str(path))["elements"]
    assert seen[1]["elements"] > seen[0]["elements"]  # the second flush's rows and episode were read
