"""`lamarckian-hpc train` and `inspect` as a user runs them: real subprocesses, a real (short) PPO
run on CartPole, and the run file it leaves behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import h5py
import pytest
import torch

from lamarckian_hpc.cli import run_path_for
from lamarckian_hpc.config import load_config
from lamarckian_hpc.storage import open_run

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
CARTPOLE_CONFIG = REPOSITORY_ROOT / "configs" / "ppo_cartpole.yaml"
CLI_TIMEOUT_SECONDS = 120
USAGE_ERROR = 2
SMOKE_ENV_STEPS = 2048
SMOKE_OVERRIDES = [f"stop.total_env_steps={SMOKE_ENV_STEPS}", "stop.target_return=null", "storage.run_name=smoke",
                   "runtime.mode=serial"]
SmokeRun = tuple[subprocess.CompletedProcess[str], Path]  # the train process and its storage directory


def run_cli(arguments: list[str], cwd: Path = REPOSITORY_ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lamarckian_hpc", *arguments],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_SECONDS,
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == USAGE_ERROR, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].strip(), result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    return lines[0]


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> SmokeRun:
    """One short CartPole run from configs/ppo_cartpole.yaml, shared by the tests below."""
    directory = tmp_path_factory.mktemp("runs")
    result = run_cli(["train", "configs/ppo_cartpole.yaml", *SMOKE_OVERRIDES, f"storage.directory={directory}"])
    return result, directory


def test_train_exits_zero_and_prints_the_run_file_last(smoke_run: SmokeRun) -> None:
    result, directory = smoke_run
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    last_line = result.stdout.strip().splitlines()[-1]
    run_file = Path(last_line)
    assert run_file == directory / "smoke.h5"
    assert run_file.is_file()
    assert f"run file: {run_file}" in result.stderr
    assert "env frames" in result.stdout


def test_train_writes_a_complete_run_file(smoke_run: SmokeRun) -> None:
    result, directory = smoke_run
    assert result.returncode == 0, result.stderr
    resolved = load_config(CARTPOLE_CONFIG, [*SMOKE_OVERRIDES, f"storage.directory={directory}"])
    with open_run(directory / "smoke.h5") as reader:
        assert reader.config == resolved.to_json_dict()
        assert reader.config["seed"] == resolved.seed
        assert reader.config["env"]["id"] == resolved.env.id == "CartPole-v1"
        assert reader.meta["config_file"] == "configs/ppo_cartpole.yaml"
        assert reader.closed_cleanly is True
        summary = reader.summary()
        num_updates = SMOKE_ENV_STEPS // resolved.algorithm.batch_size
        for name in ("loss_policy", "loss_value", "entropy", "learning_rate", "episode_return_mean"):
            series = reader.metric(name)
            assert len(series) == num_updates, name
            assert (series.env_frames[1:] > series.env_frames[:-1]).all()
        returns = reader.metric("episode_return_mean").value
        assert ((returns >= 1.0) & (returns <= 500.0)).all()  # CartPole returns lie in [1, 500]
        assert summary.env_frames >= SMOKE_ENV_STEPS
        assert reader.metric("loss_policy").env_frames[-1] == summary.env_frames


def test_run_path_never_overwrites_an_existing_run(tmp_path: Path) -> None:
    named = load_config(CARTPOLE_CONFIG, ["storage.run_name=twice", f"storage.directory={tmp_path}"])
    assert run_path_for(named, str(CARTPOLE_CONFIG)) == tmp_path / "twice.h5"
    (tmp_path / "twice.h5").write_bytes(b"an earlier run")
    assert run_path_for(named, str(CARTPOLE_CONFIG)) == tmp_path / "twice-2.h5"
    (tmp_path / "twice-2.h5").write_bytes(b"a second run")
    assert run_path_for(named, str(CARTPOLE_CONFIG)) == tmp_path / "twice-3.h5"


def test_default_run_name_says_which_config_and_seed(tmp_path: Path) -> None:
    unnamed = load_config(CARTPOLE_CONFIG, ["seed=7", f"storage.directory={tmp_path}"])
    path = run_path_for(unnamed, str(CARTPOLE_CONFIG))
    assert path.parent == tmp_path
    assert path.name.startswith("ppo_cartpole-") and path.name.endswith("-s7.h5")


def test_inspect_prints_config_and_metric_names(smoke_run: SmokeRun) -> None:
    _, directory = smoke_run
    result = run_cli(["inspect", str(directory / "smoke.h5")])
    assert result.returncode == 0, result.stderr
    assert "(completed)" in result.stdout
    for text in ("seed", "env.id", "CartPole-v1", "algorithm.batch_size", "loss_policy", "episode_return_mean",
                 "env_frames_per_second"):
        assert text in result.stdout, text


def test_inspect_json(smoke_run: SmokeRun) -> None:
    _, directory = smoke_run
    result = run_cli(["inspect", str(directory / "smoke.h5"), "--json"])
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert {"config", "last_values", "counts"} <= set(summary)
    assert summary["config"]["env"]["id"] == "CartPole-v1"
    assert summary["config"]["stop"]["total_env_steps"] == SMOKE_ENV_STEPS
    assert summary["closed_cleanly"] is True
    assert summary["env_frames"] >= SMOKE_ENV_STEPS
    assert summary["counts"]["loss_policy"] >= 1
    assert summary["counts"]["episode_return_mean"] >= 1
    assert isinstance(summary["last_values"]["loss_policy"], float)
    assert set(summary["last_values"]) == set(summary["counts"])


def test_inspect_missing_file(tmp_path: Path) -> None:
    line = assert_one_line_error(run_cli(["inspect", "missing.h5"], cwd=tmp_path))
    assert "missing.h5" in line


def test_inspect_file_that_is_not_hdf5(tmp_path: Path) -> None:
    path = tmp_path / "notes.h5"
    path.write_text("not an HDF5 file\n")
    line = assert_one_line_error(run_cli(["inspect", str(path)], cwd=tmp_path))
    assert "notes.h5" in line


def test_inspect_hdf5_file_that_is_not_a_run(tmp_path: Path) -> None:
    path = tmp_path / "other.h5"
    with h5py.File(path, "w") as file:
        file.create_dataset("numbers", data=[1, 2, 3])
    line = assert_one_line_error(run_cli(["inspect", str(path)], cwd=tmp_path))
    assert "other.h5" in line


def test_train_unknown_environment_is_a_one_line_error(tmp_path: Path) -> None:
    result = run_cli(["train", str(CARTPOLE_CONFIG), "env.id=NoSuchEnv-v0"], cwd=tmp_path)
    line = assert_one_line_error(result)
    assert "NoSuchEnv-v0" in line
    assert not (tmp_path / "runs").exists()


def test_train_unknown_environment_keyword_is_a_one_line_error(tmp_path: Path) -> None:
    result = run_cli(["train", str(CARTPOLE_CONFIG), "env.kwargs={no_such_keyword: 1}"], cwd=tmp_path)
    line = assert_one_line_error(result)
    assert "no_such_keyword" in line
    assert not (tmp_path / "runs").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_train_cuda_without_gpu_is_a_one_line_error(tmp_path: Path) -> None:
    result = run_cli(["train", str(CARTPOLE_CONFIG), "runtime.device=cuda"], cwd=tmp_path)
    line = assert_one_line_error(result)
    assert "cuda" in line
    assert not (tmp_path / "runs").exists()


def test_train_unsupported_observation_space_is_a_one_line_error(tmp_path: Path) -> None:
    result = run_cli(["train", str(CARTPOLE_CONFIG), "env.id=Blackjack-v1"], cwd=tmp_path)
    line = assert_one_line_error(result)
    assert "observation space" in line
    assert not (tmp_path / "runs").exists()
