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
        assert reader.meta["broadcast_layout"] == "serial"  # no actors, no broadcast
        assert reader.meta["learner_device"].startswith("cpu: ")  # which device, and why (no GPU here)
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
    assert "learner on cpu: " in result.stdout  # the device the learner chose, and why
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
    assert line.count("notes.h5") == 1, line  # named once, not by the reader and again by the command


def test_inspect_hdf5_file_that_is_not_a_run(tmp_path: Path) -> None:
    path = tmp_path / "other.h5"
    with h5py.File(path, "w") as file:
        file.create_dataset("numbers", data=[1, 2, 3])
    line = assert_one_line_error(run_cli(["inspect", str(path)], cwd=tmp_path))
    assert line.count("other.h5") == 1 and "not a run file" in line, line


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


def test_version_prints_the_package_version() -> None:
    from lamarckian_hpc import __version__

    result = run_cli(["--version"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"lamarckian-hpc {__version__}"


@pytest.mark.parametrize("config_file, root_key", [("ppo_cartpole.yaml", "env"), ("nsga2_zdt1.yaml", "problem"),
                                                   ("pbt_ppo_cartpole.yaml", "ppo")])
def test_config_show_prints_every_default_and_reads_back_the_same(tmp_path: Path, config_file: str,
                                                                   root_key: str) -> None:
    import yaml

    from lamarckian_hpc.config.evorl import config_model

    path = REPOSITORY_ROOT / "configs" / config_file
    result = run_cli(["config", "show", str(path), "seed=7"])
    assert result.returncode == 0, result.stderr
    shown = yaml.safe_load(result.stdout)
    assert shown["seed"] == 7 and root_key in shown
    expected = load_config(path, ["seed=7"], config_model(path))
    # Every field is printed, defaults included, and the printed file is a config that loads to the same run.
    assert shown == expected.model_dump(mode="json")
    resolved = tmp_path / "resolved.yaml"
    resolved.write_text(result.stdout)
    assert load_config(resolved, [], config_model(resolved)) == expected


def test_config_show_bad_field_is_a_one_line_error() -> None:
    line = assert_one_line_error(run_cli(["config", "show", str(CARTPOLE_CONFIG), "algorithm.clip_range=1.5"]))
    assert "algorithm.clip_range" in line


@pytest.mark.parametrize("argv, overrides", [
    (["train", "c.yaml", "--resume", "r.h5", "seed=1"], ["seed=1"]),
    (["train", "c.yaml", "seed=1", "--resume", "r.h5", "env.num_envs=2"], ["seed=1", "env.num_envs=2"]),
    (["evolve", "c.yaml", "--resume", "r.h5", "seed=1"], ["seed=1"]),
    (["launch", "c.yaml", "--nodes", "2", "seed=1", "--time", "5"], ["seed=1"]),
    (["launch", "c.yaml", "seed=1", "--nodes", "2", "env.num_envs=2"], ["seed=1", "env.num_envs=2"]),
    (["config", "show", "c.yaml", "seed=1"], ["seed=1"]),
])
def test_overrides_may_stand_before_or_after_the_options(argv: list[str], overrides: list[str]) -> None:
    from lamarckian_hpc.cli import build_parser, parse_arguments

    args = parse_arguments(build_parser(), argv)
    assert args.overrides == overrides
    if argv[0] == "launch":
        assert (args.nodes, args.config) == (2, "c.yaml")


def test_unknown_options_are_still_rejected() -> None:
    result = run_cli(["train", str(CARTPOLE_CONFIG), "--bogus", "seed=1"])
    assert result.returncode == USAGE_ERROR
    assert "unrecognized arguments: --bogus" in result.stderr


@pytest.mark.second_pass
def test_local_ray_run_authenticates_itself_and_keeps_its_files_to_itself(tmp_path: Path) -> None:
    """A local run neither prints Ray's token warning, nor writes a token into the user's home, nor
    uses the shared /tmp/ray; its own Ray temp dir is gone once it exits."""
    import os
    import shutil
    import tempfile
    import time

    home, temp = tmp_path / "home", Path(tempfile.mkdtemp(dir="/tmp"))  # short: Ray's socket paths sit below
    home.mkdir()
    env = {key: value for key, value in os.environ.items() if not key.startswith("RAY_")}
    env.update(HOME=str(home), TMPDIR=str(temp))
    started = time.time()
    result = subprocess.run([sys.executable, "-m", "lamarckian_hpc", "train", str(CARTPOLE_CONFIG),
                             "runtime.num_actors=1", "stop.total_env_steps=1024", "stop.target_return=null",
                             f"storage.directory={tmp_path / 'runs'}"],
                            capture_output=True, text=True, timeout=CLI_TIMEOUT_SECONDS, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "authentication" not in result.stderr.lower(), result.stderr[-2000:]
    assert not (home / ".ray").exists()
    left = list(temp.iterdir())
    shutil.rmtree(temp)
    assert left == []
    shared = Path("/tmp/ray/session_latest")
    assert not (shared.exists() and shared.lstat().st_mtime >= started), "the run used the shared /tmp/ray"
    # runtime.broadcast: auto on one host is flat, and /meta says what was used
    (run_file,) = (tmp_path / "runs").glob("*.h5")
    with open_run(run_file) as reader:
        assert reader.meta["broadcast_layout"] == "flat" and "broadcast_tree" not in reader.meta
        assert reader.meta["learner_experience_connections"] == 1 == sum(reader.meta["actors_per_node"].values())
        assert reader.meta["learner_experience_address"].startswith("tcp://127.0.0.1:")
        assert reader.meta["learner_weights_address"] != reader.meta["learner_experience_address"]
        assert reader.meta["message_steps"] == 256  # what the run decided: a rollout of 32 ticks of 8 envs
        assert reader.meta["learner_device"].startswith("cpu: ")
