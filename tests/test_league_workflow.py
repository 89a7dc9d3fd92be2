"""The AlphaStar league on the population workflow: its three kinds of learners train at once on
forked workers, matchmaking's opponents travel to them, snapshots join and exploiters reset on
schedule, every match lands in `/league` with the payoff and Elo, and `--resume` continues the
league, its learners and its records where the checkpoint left them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lamarckian_hpc.cli import main
from lamarckian_hpc.league.league import Role
from lamarckian_hpc.league.store import read_league
from lamarckian_hpc.runtime.learner.checkpoint import checkpoint_path, load_run_state
from lamarckian_hpc.storage import open_run

ROOT = Path(__file__).resolve().parents[1]
TINY = ["env.num_envs=4", "ppo.batch_size=256", "ppo.num_epochs=1", "model.policy_hidden_sizes=[16]",
        "league.snapshot_interval=2", "league.exploiter_max_updates=2", "algorithm.scripted_evaluation_interval=2",
        "algorithm.scripted_evaluation_episodes=1", "runtime.mode=fork", "runtime.num_workers=2",
        "storage.checkpoint_interval_seconds=0.001"]


def test_a_league_trains_its_roles_on_workers_records_every_match_and_resumes(tmp_path, capsys):
    common = [str(ROOT / "configs" / "league_pong.yaml"), *TINY, f"storage.directory={tmp_path}"]
    assert main(["league", *common, "algorithm.generations=4", "storage.run_name=league"]) == 0
    run = tmp_path / "league.h5"
    record = read_league(run)
    roles = list(record.roles)
    assert roles[:3] == [Role.MAIN_AGENT, Role.MAIN_EXPLOITER, Role.LEAGUE_EXPLOITER]
    snapshots = [k for k, role in enumerate(roles) if role == Role.SNAPSHOT]
    # The initial snapshot, the main agent's every 2 updates, and each exploiter's at its reset.
    assert len(snapshots) >= 1 + 2 + 2 and {int(record.parents[k]) for k in snapshots} == {0, 1, 2}
    matches = record.matches
    assert len(matches["learner"]) == 3 * 4 and list(matches["learner"][:3]) == [0, 1, 2]
    played = matches["wins"] + matches["draws"] + matches["losses"]
    assert played.sum() > 0 and (matches["opponent"] < len(roles)).all()
    assert record.history_elo.shape[0] == 4 and not np.allclose(record.elo[:3], 1000.0)
    with open_run(run) as reader:
        assert reader.closed_cleanly
        assert len(reader.metric("elo_main_0")) == 4 and len(reader.metric("win_rate_vs_targets_league_exploiter_0")) == 4
        scripted = reader.metric("main_score_vs_scripted").value
        assert np.isfinite(scripted[[1, 3]]).all() and np.isnan(scripted[[0, 2]]).all()
        resets = reader.metric("resets").value
    assert resets.sum() >= 2  # exploiters restart from the initial weights
    saved = load_run_state(checkpoint_path(run), "league")
    assert saved["generation"] == 4 and len(saved["members"]) == 3

    assert main(["league", "--resume", str(run), "algorithm.generations=6"]) == 0
    resumed = read_league(run)
    assert len(resumed.matches["learner"]) == 3 * 6 and resumed.history_elo.shape[0] == 6
    np.testing.assert_array_equal(resumed.matches["opponent"][:12], matches["opponent"])
    assert len(resumed.names) >= len(record.names)
    with open_run(run) as reader:
        assert reader.meta["resumes"] == 1 and len(reader.metric("elo_main_0")) == 6

    capsys.readouterr()
    assert main(["league", "--resume", str(run), "algorithm.generations=6"]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and "larger budget" in lines[0], lines


def test_a_learner_plays_exactly_the_opponent_it_is_given_and_resets_to_the_initial_policy():
    import torch

    from lamarckian_hpc.config import load_config
    from lamarckian_hpc.config.league_run import LeagueRunConfig
    from lamarckian_hpc.evorl.league_learners import LeagueLearners, initial_weights, score_against_scripted

    torch.set_num_threads(1)
    config = load_config(ROOT / "configs" / "league_pong.yaml", TINY + ["env.kwargs={points_to_win: 1}"],
                         LeagueRunConfig)
    learners = LeagueLearners(config, [0, 2])
    try:
        start = initial_weights(config)
        for slot in (0, 2):  # every learner starts from the one initial policy
            for name, array in learners.members[slot].checkpoint()["weights"].items():
                np.testing.assert_array_equal(array, start[name])
        opponent = {name: np.full_like(array, 0.01) for name, array in start.items()}
        answer = learners.update(0, opponent)
        for name, tensor in learners.members[0].opponent.state_dict().items():
            np.testing.assert_array_equal(tensor.numpy(), opponent[name])
        assert answer["wins"] + answer["draws"] + answer["losses"] > 0 and answer["env_frames"] >= 256
        assert any(not np.array_equal(answer["weights"][name], start[name]) for name in start)  # it learned
        self_play = learners.update(0, None)  # against itself: the opponent takes its current weights
        for name, tensor in learners.members[0].opponent.state_dict().items():
            np.testing.assert_array_equal(tensor.numpy(), answer["weights"][name])
        learners.reset(0, start)
        for name, array in learners.members[0].checkpoint()["weights"].items():
            np.testing.assert_array_equal(array, start[name])
        assert learners.members[0].checkpoint()["moments"] == {}  # a fresh optimizer
        assert self_play["env_frames"] > answer["env_frames"]
        assert -1 <= score_against_scripted(learners.members[2].model, 1, points_to_win=1) <= 1
    finally:
        learners.close()


def test_the_learners_of_a_worker_update_together_as_they_do_one_by_one():
    """One batched PPO step over a worker's learners learns what one update each learns: the same
    games (each learner samples alone against its own opponent) and weights within float rounding."""
    import torch

    from lamarckian_hpc.config import load_config
    from lamarckian_hpc.config.league_run import LeagueRunConfig
    from lamarckian_hpc.evorl.league_learners import LeagueLearners, initial_weights

    torch.set_num_threads(1)
    answers = {}
    for batched in (True, False):
        config = load_config(ROOT / "configs" / "league_pong.yaml",
                             TINY + [f"runtime.batched_updates={str(batched).lower()}"], LeagueRunConfig)
        learners = LeagueLearners(config, [0, 1])
        assert (learners.batched is not None) == batched
        opponent = {name: 0.5 * array for name, array in initial_weights(config).items()}
        try:
            answers[batched] = [learners.update_all([None, opponent]) for _ in range(2)]
        finally:
            learners.close()
    for together, alone in zip(answers[True], answers[False]):
        for mine, theirs in zip(together, alone):
            assert (mine["wins"], mine["losses"], mine["env_frames"]) == (theirs["wins"], theirs["losses"],
                                                                          theirs["env_frames"])
            for name, array in theirs["weights"].items():
                np.testing.assert_allclose(mine["weights"][name], array, rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("arguments, words", [
    (["configs/league_pong.yaml", "env.id=CartPole-v1"], "two-player PettingZoo"),
    (["configs/league_pong.yaml", "algorithm.seats=[left, left]"], "two different agents"),
    (["configs/pbt_ppo_cartpole.yaml"], "league runs a config with algorithm.name: league, not pbt"),
])
def test_what_a_league_cannot_run_is_one_line(capsys, arguments, words):
    assert main(["league", str(ROOT / arguments[0]), *arguments[1:]]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and words in lines[0], lines
