"""`lamarckian-hpc evaluate`: a tiny CartPole run trained here (serial, a few thousand frames) is
played from its checkpoint; the printed returns are those of the same greedy policy played by
hand with the same seeds, the interval is Student's t one, and --gif and --record write what
`replay` and the trajectory analysis read."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image
from scipy import stats

from lamarckian_hpc import library
from lamarckian_hpc.cli import main
from lamarckian_hpc.config import RunConfig
from lamarckian_hpc.envs.pong_two_player import PongTwoPlayer
from lamarckian_hpc.evorl.trained_members import load_pbt_member
from lamarckian_hpc.runtime.algorithms import build_model
from lamarckian_hpc.runtime.learner.checkpoint import checkpoint_path, load_checkpoint, load_run_state
from lamarckian_hpc.runtime.run_shape import spaces_of
from lamarckian_hpc.storage import open_run
from lamarckian_hpc.trained.policy import load_trained_policy

ROOT = Path(__file__).resolve().parents[1]
TINY = ["runtime.mode=serial", "env.num_envs=4", "stop.total_env_steps=2048", "stop.target_return=null",
        "storage.trajectories.every_episodes=0"]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("evaluate")
    return library.run(ROOT / "configs" / "ppo_cartpole.yaml",
                       [*TINY, f"storage.directory={folder}", "storage.run_name=tiny"]).path


def _evaluate(capsys: pytest.CaptureFixture, *arguments: str) -> dict:
    assert main(["evaluate", *arguments, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _by_hand(run: Path, episodes: int, seed: int, model: torch.nn.Module | None = None,
             env: gym.Env | None = None) -> list[float]:
    """The checkpoint's network, its most probable action at every step, episode k reset with seed + k."""
    model = model if model is not None else load_trained_policy(run).model
    env = env if env is not None else gym.make("CartPole-v1")
    returns = []
    for k in range(episodes):
        observation, _ = env.reset(seed=seed + k)
        total, done = 0.0, False
        while not done:
            with torch.no_grad():
                logits = model.head.logits(model.trunk(torch.as_tensor(observation[None])))
            observation, reward, terminated, truncated, _ = env.step(int(logits.argmax()))
            total, done = total + reward, terminated or truncated
        returns.append(total)
    return returns


def test_greedy_returns_are_the_policys_own(run: Path, capsys: pytest.CaptureFixture) -> None:
    printed = _evaluate(capsys, str(run), "--episodes", "6", "--seed", "11")
    assert printed["returns"] == _by_hand(run, 6, 11)
    assert printed["mean_return"] == pytest.approx(np.mean(printed["returns"]))
    assert printed["policy_version"] == load_checkpoint(checkpoint_path(run)).policy_version == 4
    assert _evaluate(capsys, str(run), "--episodes", "6", "--seed", "11")["returns"] == printed["returns"]


def test_the_interval_is_students_t(run: Path, capsys: pytest.CaptureFixture) -> None:
    printed = {n: _evaluate(capsys, str(run), "--episodes", str(n), "--sample", "--seed", "3") for n in (5, 40)}
    for n, result in printed.items():
        returns = np.asarray(result["returns"])
        assert len(returns) == n and returns.std() > 0
        expected = stats.t.ppf(0.975, n - 1) * returns.std(ddof=1) / np.sqrt(n)
        assert result["half_width_95"] == pytest.approx(expected) and expected > 0
    assert printed[40]["half_width_95"] < printed[5]["half_width_95"]


def test_the_table_shows_mean_and_interval(run: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["evaluate", str(run), "--episodes", "3"]) == 0
    out = capsys.readouterr().out
    assert "mean return" in out and "95% CI" in out and "greedy actions" in out


def test_gif_and_record(run: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    gif, record = tmp_path / "first.gif", tmp_path / "episodes.h5"
    printed = _evaluate(capsys, str(run), "--episodes", "4", "--gif", str(gif), "--record", str(record))
    with Image.open(gif) as picture:
        assert picture.format == "GIF" and picture.n_frames == printed["lengths"][0] > 1
    with open_run(record) as reader:
        index = reader.episodes("main")
        assert list(index["episode"]) == [0, 1, 2, 3]
        assert list(index["return"]) == printed["returns"] and list(index["length"]) == printed["lengths"]
        assert reader.config["env"]["id"] == "CartPole-v1"
    out = tmp_path / "analysis"
    spec = importlib.util.spec_from_file_location("trajectories_script", ROOT / "analysis" / "trajectories.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main([str(record), "--out", str(out)]) == 0
    table = pd.read_csv(out / "trajectories.csv")
    assert table["episodes"].tolist() == [4] and table["steps"].tolist() == [sum(printed["lengths"])]


def test_mistakes_are_one_line(run: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bare = tmp_path / "bare.h5"
    bare.write_bytes(run.read_bytes())  # the run file without its checkpoints
    assert main(["evaluate", str(bare)]) == 2
    assert capsys.readouterr().err == (f"error: no checkpoint at {bare.with_suffix('.ckpt')}: the run saved none "
                                       "(storage.checkpoint_interval_seconds)\n")
    assert main(["evaluate", str(run), "--checkpoint", "best", "--episodes", "0"]) == 2
    assert capsys.readouterr().err == "error: --episodes must be at least 1, got 0\n"
    assert main(["evaluate", str(tmp_path / "none.h5")]) == 2
    assert capsys.readouterr().err == f"error: no such run file: {tmp_path / 'none.h5'}\n"


def test_a_pbt_member(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    result = library.run(ROOT / "configs" / "pbt_ppo_cartpole.yaml",
                         ["env.num_envs=4", "ppo.batch_size=256", "ppo.num_epochs=2", "model.policy_hidden_sizes=[16]",
                          "algorithm.interval_env_frames=512", "stop.target_return=null", "runtime.mode=serial",
                          "stop.total_env_frames=4096", f"storage.directory={tmp_path}", "storage.run_name=pbt"])
    best = result.summary.best_id
    state = load_run_state(checkpoint_path(result.path), "pbt")
    slot = [int(value) for value in state["program"]["pbt"]["ids"]].index(best)
    member = state["members"][slot]
    policy = load_pbt_member(result.path, best)
    for name, tensor in policy.model.state_dict().items():
        np.testing.assert_array_equal(tensor.numpy(), member["arrays"][f"model/{name}"])
    printed = _evaluate(capsys, str(result.path), "--member", str(best), "--episodes", "3", "--seed", "5")
    assert printed["returns"] == _by_hand(result.path, 3, 5, policy.model)
    assert printed["policy_version"] == member["version"]
    missing = max(int(value) for value in state["program"]["pbt"]["ids"]) + 100
    assert main(["evaluate", str(result.path), "--member", str(missing)]) == 2
    assert capsys.readouterr().err.startswith(f"error: member {missing} is not in the population {result.path} saved")
    assert main(["evaluate", str(result.path)]) == 2
    assert "is a pbt run, not a training run" in capsys.readouterr().err


def test_a_league_learner_against_the_scripted_player_and_another_learner(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    result = library.run(ROOT / "configs" / "league_pong.yaml",
                         ["env.num_envs=2", "ppo.batch_size=128", "ppo.num_epochs=1", "model.policy_hidden_sizes=[16]",
                          "algorithm.scripted_evaluation_interval=2", "algorithm.scripted_evaluation_episodes=1",
                          "runtime.mode=serial", "algorithm.generations=2", f"storage.directory={tmp_path}",
                          "storage.run_name=league"])
    state = load_run_state(checkpoint_path(result.path), "league")
    printed = _evaluate(capsys, str(result.path), "--learner", "main_exploiter_0", "--episodes", "3", "--seed", "2")
    # the learner's weights, played by hand on the scripted player's env
    model = build_model(RunConfig(env={"id": "lamarckian/Pong-v0"}, model=result.config.model,
                                  algorithm=result.config.ppo), *spaces_of(RunConfig(env={"id": "lamarckian/Pong-v0"})))
    model.load_state_dict({name: torch.as_tensor(array) for name, array in state["members"][1]["weights"].items()})
    skill = result.config.algorithm.scripted_opponent_skill
    assert printed["returns"] == _by_hand(result.path, 3, 2, model, gym.make("lamarckian/Pong-v0", opponent_skill=skill))
    returns = np.asarray(printed["returns"])
    assert printed["wins_draws_losses"] == [int((returns > 0).sum()), int((returns == 0).sum()), int((returns < 0).sum())]
    assert printed["opponent"] == f"the scripted Pong player (skill {skill:g})"

    # against another learner, in the league's own game: the learner's seat (right) against main_0's (left)
    main_model = build_model(RunConfig(env={"id": "lamarckian/Pong-v0"}, model=result.config.model,
                                       algorithm=result.config.ppo), *spaces_of(RunConfig(env={"id": "lamarckian/Pong-v0"})))
    main_model.load_state_dict({name: torch.as_tensor(array) for name, array in state["members"][0]["weights"].items()})
    game = PongTwoPlayer()
    by_hand = []
    for k in range(3):
        observations, _ = game.reset(seed=2 + k)
        total = 0.0
        while game.agents:
            with torch.no_grad():
                actions = {seat: int(net.head.logits(net.trunk(torch.as_tensor(observations[seat][None]))).argmax())
                           for seat, net in (("right", model), ("left", main_model))}
            observations, rewards, _, _, _ = game.step(actions)
            total += rewards["right"]
        by_hand.append(total)
    match = _evaluate(capsys, str(result.path), "--learner", "main_exploiter_0", "--opponent", "main_0",
                      "--episodes", "3", "--seed", "2")
    assert match["returns"] == by_hand and match["opponent"] == "learner main_0 (greedy)"
    assert main(["evaluate", str(result.path), "--learner", "main_9"]) == 2
    assert capsys.readouterr().err == (f"error: {result.path} has no learner 'main_9' (learners: main_0, "
                                       "main_exploiter_0, league_exploiter_0)\n")
