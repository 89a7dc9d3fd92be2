"""The library under the commands: `lamarckian_hpc.run` takes a train or an evolve config to a run
file and returns its result; `lamarckian-hpc run` takes any config; a command given a config it
cannot run says in one line which command can. Real (tiny) runs: a few hundred frames, one
generation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import lamarckian_hpc
from lamarckian_hpc.cli import main
from lamarckian_hpc.config import ConfigError
from lamarckian_hpc.storage import open_run

ROOT = Path(__file__).resolve().parents[1]
PPO = str(ROOT / "configs" / "ppo_cartpole.yaml")
NSGA2 = str(ROOT / "configs" / "nsga2_zdt1.yaml")
PBT = str(ROOT / "configs" / "pbt_ppo_cartpole.yaml")
TINY_TRAIN = ["stop.total_env_steps=256", "stop.target_return=null", "runtime.mode=serial"]
TINY_EVOLVE = ["runtime.mode=serial", "algorithm.population_size=8", "algorithm.generations=1"]
TINY_PBT = ["runtime.mode=serial", "env.num_envs=4", "ppo.num_epochs=1", "model.policy_hidden_sizes=[16]",
            "algorithm.population_size=2", "algorithm.interval_env_frames=256", "stop.total_env_frames=256",
            "stop.target_return=null"]


def test_run_trains_a_train_config_into_the_run_file_it_returns(tmp_path: Path) -> None:
    result = lamarckian_hpc.run(PPO, TINY_TRAIN, output=tmp_path / "ppo.h5")
    assert (result.path, result.workload, result.algorithm) == (tmp_path / "ppo.h5", "train", "ppo")
    assert result.summary.env_frames >= 256 and result.summary.updates >= 1
    with open_run(result.path) as reader:
        assert reader.closed_cleanly and reader.config["algorithm"]["name"] == "ppo"


def test_run_evolves_an_evolve_config_into_the_run_file_it_returns(tmp_path: Path) -> None:
    result = lamarckian_hpc.run(NSGA2, TINY_EVOLVE, output=tmp_path / "nsga2.h5")
    assert (result.workload, result.algorithm, result.summary.problem) == ("evolve", "nsga2", "ZDT1")
    assert any(label.startswith("hypervolume") for label, _ in result.summary.rows)
    with open_run(result.path) as reader:
        assert reader.closed_cleanly and len(reader.population()["id"]) == 8


def test_run_takes_a_config_tree_and_names_the_run_after_storage(tmp_path: Path) -> None:
    tree = {"problem": {"name": "zdt1"}, "algorithm": {"name": "nsga2"},
            "storage": {"directory": str(tmp_path), "run_name": "tree"}}
    result = lamarckian_hpc.run(tree, TINY_EVOLVE)
    assert result.path == tmp_path / "tree.h5" and result.path.is_file()


def test_run_refuses_to_overwrite_a_run_file(tmp_path: Path) -> None:
    existing = tmp_path / "taken.h5"
    existing.write_bytes(b"")
    with pytest.raises(lamarckian_hpc.RunFailed, match="taken.h5 exists") as refused:
        lamarckian_hpc.run(NSGA2, TINY_EVOLVE, output=existing)
    assert refused.value.exit_status == 2


@pytest.mark.parametrize("command, config, right", [("train", PBT, "evolve"), ("evolve", PPO, "train"),
                                                    ("league", PBT, "evolve"), ("league", PPO, "train")])
def test_prepare_refuses_another_commands_config_naming_the_one_that_runs_it(command, config, right) -> None:
    with pytest.raises(ConfigError) as refused:
        lamarckian_hpc.prepare(config, command=command)
    line = str(refused.value)
    assert "\n" not in line and f"lamarckian-hpc {right} {config}" in line and f"lamarckian-hpc run {config}" in line


def test_run_command_trains_a_train_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", PPO, *TINY_TRAIN, f"storage.directory={tmp_path}", "storage.run_name=ppo"]) == 0
    out = capsys.readouterr().out
    assert "mean return" in out and out.strip().splitlines()[-1] == str(tmp_path / "ppo.h5")


def test_run_command_runs_a_pbt_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", PBT, *TINY_PBT, f"storage.directory={tmp_path}", "storage.run_name=pbt"]) == 0
    out = capsys.readouterr().out
    assert "best member" in out and out.strip().splitlines()[-1] == str(tmp_path / "pbt.h5")
    with open_run(tmp_path / "pbt.h5") as reader:
        assert reader.closed_cleanly and len(reader.population()["id"]) == 2


def test_train_on_a_pbt_config_is_one_line_naming_evolve_and_run() -> None:
    result = subprocess.run([sys.executable, "-m", "lamarckian_hpc", "train", "configs/pbt_ppo_cartpole.yaml"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "lamarckian-hpc evolve configs/pbt_ppo_cartpole.yaml" in lines[0] and "lamarckian-hpc run" in lines[0]


def test_evolve_on_a_train_config_is_one_line_naming_train(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["evolve", PPO]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and f"lamarckian-hpc train {PPO}" in lines[0], lines


def test_resuming_with_the_wrong_command_names_the_right_one(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    run = lamarckian_hpc.run(NSGA2, TINY_EVOLVE, output=tmp_path / "evo.h5").path
    capsys.readouterr()
    assert main(["train", "--resume", str(run)]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and f"lamarckian-hpc evolve --resume {run}" in lines[0], lines
