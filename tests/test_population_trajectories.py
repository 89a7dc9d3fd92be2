"""Population runs record episodes in their run file's `/trajectories`, as `train` runs do: a PBT
run's members (forked workers, their episodes sent over the pipe to the one process that writes the
file), a league's learners and EMOGI's evaluation episodes, each episode tagged with whose it is
(member, generation, opponent).

Real cut-down runs of configs/pbt_ppo_cartpole.yaml, configs/league_pong.yaml and
configs/emogi_pong.yaml; the tags are
checked against what the same run file says elsewhere (`/population` rows, the league's matches),
and the episodes are read back through `analysis/trajectories.py` and `lamarckian-hpc replay`.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
from PIL import Image

import lamarckian_hpc
from lamarckian_hpc.cli import main
from lamarckian_hpc.evorl.league_ppo import learner_names
from lamarckian_hpc.league.store import read_league
from lamarckian_hpc.storage import open_run

ROOT = Path(__file__).resolve().parents[1]
PBT = ["runtime.mode=fork", "runtime.num_workers=2", "env.num_envs=4", "ppo.batch_size=128", "ppo.num_minibatches=2",
       "ppo.num_epochs=1", "algorithm.population_size=3", "algorithm.interval_env_frames=512",
       "algorithm.truncation_fraction=0.34", "stop.total_env_frames=1536", "stop.target_return=null",
       "storage.trajectories.every_episodes=1"]
LEAGUE = ["runtime.mode=serial", "env.num_envs=2", "env.kwargs.points_to_win=1", "ppo.batch_size=128",
          "ppo.num_minibatches=2", "ppo.num_epochs=1", "model.policy_hidden_sizes=[16]", "league.snapshot_interval=1",
          "algorithm.generations=3", "algorithm.scripted_evaluation_interval=0",
          "storage.trajectories.every_episodes=2"]
EMOGI = ["runtime.mode=fork", "runtime.num_workers=2", "env.num_envs=2", "env.kwargs.points_to_win=1",
         "ppo.batch_size=128", "ppo.num_minibatches=2", "ppo.num_epochs=1", "algorithm.population_size=4",
         "algorithm.generations=2", "algorithm.initial_env_frames=256", "algorithm.offspring_env_frames=256",
         "algorithm.evaluation_episodes=4", "storage.trajectories.every_episodes=2"]


def test_pbt_members_record_their_episodes_tagged_with_member_and_interval(tmp_path, capsys):
    run = lamarckian_hpc.run(ROOT / "configs" / "pbt_ppo_cartpole.yaml", PBT, output=tmp_path / "pbt.h5").path
    with open_run(run) as reader:
        assert reader.closed_cleanly and reader.trajectory_policies() == ["main"]
        population = reader.population()
        index = reader.episodes()
        rows = {(int(g), int(i)) for g, i in zip(population["generation"], population["id"])}
        tagged = set(zip(index["generation"].tolist(), index["member"].tolist()))
        # Every member of every interval recorded episodes (every_episodes=1), and every episode is
        # tagged with a member of /population in that interval; an exploit's new id is among them.
        assert tagged == rows and {g for g, _ in tagged} == {0, 1, 2}
        assert len({member for _, member in tagged}) > 3
        assert (index["opponent"] == "").all()
        assert max(Counter(zip(index["member"].tolist(), index["episode"].tolist())).values()) == 1
        assert {int(index["actor"][k]) for k in range(len(index["episode"]))} == {0, 1}  # both workers sent some
        for row in (0, len(index["episode"]) - 1):
            steps = reader.episode_at(row)
            assert len(steps["rewards"]) == index["length"][row] == index["return"][row]  # CartPole: 1 per step
            assert steps["observations"].shape == (index["length"][row], 4)
        member, number = int(index["member"][-1]), int(index["episode"][-1])
        shared = [int(n) for n, count in Counter(index["episode"].tolist()).items() if count > 1][0]

    out = tmp_path / "analysis"
    result = subprocess.run([sys.executable, str(ROOT / "analysis" / "trajectories.py"), str(run), "--out", str(out),
                             "--member", str(member), "--generation", "2"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    table = pd.read_csv(out / "trajectories.csv")
    assert list(table["member"]) == [member] and list(table["generation_first"]) == [2]
    mask = (index["member"] == member) & (index["generation"] == 2)
    assert table["episodes"].iloc[0] == mask.sum() and table["steps"].iloc[0] == index["length"][mask].sum()
    assert (out / f"rewards_pbt_main_member{member}_generation2.png").is_file()

    gif = tmp_path / "episode.gif"
    assert main(["replay", str(run), "--episode", str(number), "--member", str(member), "--out", str(gif)]) == 0
    assert Image.open(gif).n_frames == index["length"][-1]
    capsys.readouterr()
    assert main(["replay", str(run), "--episode", str(shared), "--out", str(gif)]) == 2  # several members have it
    assert "name one" in capsys.readouterr().err


def test_league_learners_record_their_games_tagged_with_generation_and_opponent(tmp_path):
    config = ROOT / "configs" / "league_pong.yaml"
    run = lamarckian_hpc.run(config, LEAGUE, output=tmp_path / "league.h5").path
    names = learner_names(lamarckian_hpc.prepare(config, LEAGUE).config)
    league = read_league(run)
    opponents = league.matches["opponent"].reshape(3, len(names))  # a match per learner and generation
    with open_run(run) as reader:
        assert sorted(reader.trajectory_policies()) == sorted(names)
        seen = set()
        for slot, name in enumerate(names):
            index = reader.episodes(name)
            assert len(index["episode"]) and (index["member"] == slot).all()
            for generation, opponent in zip(index["generation"], index["opponent"]):
                assert opponent == league.names[opponents[generation, slot]]  # whom the league chose
                seen.add(opponent)
            steps = reader.episode(int(index["episode"][0]), name)
            assert steps["observations"].shape[1:] == (6,) and len(steps["rewards"]) == index["length"][0]
    assert len(seen) >= 2 and any("@" in opponent for opponent in seen)  # learners and snapshots


def test_emogi_records_evaluation_episodes_tagged_with_policy_and_generation(tmp_path):
    run = lamarckian_hpc.run(ROOT / "configs" / "emogi_pong.yaml", EMOGI, output=tmp_path / "emogi.h5").path
    with open_run(run) as reader:
        population, index = reader.population(), reader.episodes("main")
        # Of each policy's 4 evaluation games, the 1st and 3rd (every_episodes=2), tagged with its
        # /population id and generation.
        rows = sorted(zip(population["generation"].tolist(), population["id"].tolist()))
        assert sorted(set(zip(index["generation"].tolist(), index["member"].tolist()))) == rows
        assert Counter(index["episode"].tolist()) == {0: len(rows), 2: len(rows)}
        for row in range(len(index["episode"])):
            steps = reader.episode_at(row, "main")
            # The plain game's reward (no behaviour terms): one point decides a game here.
            assert steps["rewards"].sum() == index["return"][row] and abs(index["return"][row]) == 1
            assert steps["observations"].shape == (index["length"][row], 6) and steps["terminated"][-1]
