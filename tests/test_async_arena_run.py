"""The asynchronous arena from a config (`env.id: mdp:lamarckian_hpc.envs.async_arena`): its kwargs
make the arena they say or fail with one line naming the bad one, a `lamarckian-hpc train` run on
real Ray actors records episodes of fast and slow players (a player joining late and one dropped
for lagging included), and one policy shared by the players learns to collect coins."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from test_distributed import local_ray  # noqa: E402, F401 - the module's Ray (autouse)
from trajectory_checks import assert_episodes_consistent  # noqa: E402

from lamarckian_hpc.cli import main  # noqa: E402
from lamarckian_hpc.config import ConfigError, load_config  # noqa: E402
from lamarckian_hpc.envs.async_arena import AsyncArenaMDP, make_mdp  # noqa: E402
from lamarckian_hpc.runtime.actor.multiagent_sampling import make_multiagent_mdps, multiagent_spaces  # noqa: E402
from lamarckian_hpc.storage import open_run  # noqa: E402

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "multiagent_async_arena.yaml"
STAY = 0


def _turns(mdp: AsyncArenaMDP, ticks: int, left: dict[str, tuple[int, str]] | None = None) -> dict[str, list[int]]:
    """The world ticks at which each player's action was consumed, every player always ready; the
    players that left, with the tick and why, go to `left`."""
    turns: dict[str, list[int]] = {}
    for _ in range(ticks):
        for agent in mdp.agent_ids():
            mdp.pending_actions.setdefault(agent, STAY)
        for agent, outcome in mdp.tick().items():
            mdp.pending_actions.pop(agent, None)
            if "left" in outcome.info:
                assert outcome.truncated
                (left if left is not None else {})[str(agent)] = (outcome.info["clock"], outcome.info["left"])
            else:
                turns.setdefault(str(agent), []).append(outcome.info["clock"])
    return turns


def test_the_config_makes_the_arena_its_kwargs_describe():
    config = load_config(CONFIG, ["env.kwargs.late_probability={}", "env.kwargs.joins={late: {at: 6, period: 2}}",
                                  "env.num_envs=2"])
    mdps = make_multiagent_mdps(config)
    assert len(mdps) == 2 and all(isinstance(mdp, AsyncArenaMDP) for mdp in mdps)
    mdp = mdps[0]
    mdp.reset(seed=0)
    assert mdp.agent_ids() == ["fast", "slow"] and mdp.possible_agents == ["fast", "slow", "late"]
    turns = _turns(mdp, 12)
    assert turns["fast"] == list(range(1, 13)) and turns["slow"] == [4, 8, 12] and turns["late"] == [8, 10, 12]
    # Every player the episode may have is bound by the config's map, the late one included.
    assert multiagent_spaces(config).agents == ("fast", "slow", "late")


def test_lag_and_late_actions_idle_a_player_and_a_long_lag_drops_it():
    mdp = make_mdp(players={"fast": 1, "lagger": 1}, lag={"lagger": 100}, idle_timeout=3, max_ticks=20)
    mdp.reset(seed=1)
    left: dict[str, tuple[int, str]] = {}
    turns = _turns(mdp, 10, left)
    assert "lagger" not in turns and len(turns["fast"]) == 10  # its actions never reached the world...
    assert left == {"lagger": (3, "timeout")} and mdp.agent_ids() == ["fast"]  # ...so it was dropped
    mdp = make_mdp(players={"steady": 1, "flaky": 1}, late_probability={"flaky": 0.5}, max_ticks=100)
    mdp.reset(seed=1)
    turns = _turns(mdp, 100)
    assert len(turns["steady"]) == 100 and 35 <= len(turns["flaky"]) <= 65  # half its actions miss their turn


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"colour": "red"}, "env.kwargs.colour: not a setting of the arena; allowed: players, joins, lag, "
                        "late_probability, num_coins, width, height, idle_timeout, max_ticks"),
    ({"players": {"fast": 0}}, "env.kwargs.players.fast: period must be >= 1 world ticks, got 0"),
    ({"joins": {"late": {"at": 5, "speed": 2}}}, "env.kwargs.joins.late.speed: not a setting of a joining player; "
                                                 "allowed: at, period"),
    ({"joins": {"late": {"at": 300}}}, "env.kwargs.joins: ['late'] join at or after max_ticks=200, so never play"),
    ({"lag": {"ghost": 3}}, "env.kwargs.lag: ['ghost'] are not players; players: ['fast', 'slow']"),
    ({"late_probability": {"slow": 1.0}}, "env.kwargs.late_probability.slow: must be in [0, 1), got 1.0"),
    ({"idle_timeout": 0}, "env.kwargs.idle_timeout: Input should be greater than or equal to 1"),
])
def test_a_bad_kwarg_is_one_line_naming_it(kwargs, message):
    with pytest.raises(ValueError) as caught:
        make_mdp(**kwargs)
    assert str(caught.value) == message


def test_the_command_line_refuses_a_bad_kwarg_before_a_run_file_exists(tmp_path, capsys):
    code = main(["train", str(CONFIG), "env.kwargs.colour=red", f"storage.directory={tmp_path}"])
    error = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and error[-1].startswith("error: env.kwargs.colour: not a setting of the arena; allowed: ")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(("overrides", "message"), [
    (["multiagent=null"], r"env\.id: 'mdp:lamarckian_hpc.envs.async_arena' is a multi-agent MDP; it needs a "
                          r"multiagent section"),
    (["env.id=mdp:lamarckian_hpc/envs"], r"env\.id: multiagent training needs pettingzoo:<module> .* or "
                                         r"mdp:<module>"),
    (["env.max_episode_steps=50"], r"env\.max_episode_steps: .* max_ticks for the arena"),
])
def test_the_config_refuses_what_a_native_mdp_cannot_do(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(CONFIG, overrides)


def test_a_module_without_make_mdp_is_named():
    config = load_config(CONFIG, ["env.id=mdp:lamarckian_hpc.envs.pong"])
    with pytest.raises(ValueError, match=r"env\.id: lamarckian_hpc\.envs\.pong has no make_mdp\(\)"):
        multiagent_spaces(config)
    # The arena has no global state for a centralised critic to read.
    with pytest.raises(ValueError, match=r"multiagent\.centralized_critic: AsyncArenaMDP provides no global_state"):
        multiagent_spaces(load_config(CONFIG, ["multiagent.centralized_critic=true"]))


def test_a_ray_run_records_fast_and_slow_players_one_joining_late_and_one_dropped(tmp_path, capsys):
    """A policy per speed class; `late` joins at tick 20, `lagger` joins at tick 10 and is dropped
    5 turns later because its actions never arrive."""
    code = main(["train", str(CONFIG), f"storage.directory={tmp_path}", "storage.run_name=arena",
                 "runtime.device=cpu", "env.num_envs=2", "env.kwargs.max_ticks=60", "env.kwargs.idle_timeout=5",
                 "env.kwargs.joins={late: {at: 20, period: 2}, lagger: {at: 10, period: 1}}",
                 "env.kwargs.lag={lagger: 1000}", "multiagent.policies=[fast, slow]",
                 "multiagent.mapping={fast: fast, late: fast, slow: slow, lagger: slow}",
                 "algorithm.batch_size=128", "algorithm.num_epochs=1", "runtime.rollout_steps=20",
                 "stop.total_env_steps=1500", "storage.trajectories.every_episodes=1",
                 "storage.metrics_interval_seconds=0.5"])
    assert code == 0, capsys.readouterr().err[-2000:]
    with open_run(tmp_path / "arena.h5") as run:
        for policy_id in ("fast", "slow"):
            assert run.metric(f"policy_version.{policy_id}").value[-1] >= 1
            assert run.metric(f"episodes.{policy_id}").value[-1] >= 10
            assert np.isfinite(run.metric(f"episode_return_mean.{policy_id}").value).all()
        agents = {}
        for policy_id in ("fast", "slow"):
            index = assert_episodes_consistent(run, policy_id)
            agents[policy_id] = [run.episode(int(number), policy_id, index) for number in index["episode"]]
    by_agent = {policy_id: {str(steps["agent_id"][0]) for steps in episodes} for policy_id, episodes in agents.items()}
    assert by_agent == {"fast": {"fast", "late"}, "slow": {"slow", "lagger"}}
    # The late joiner plays fewer turns than the episode has ticks; the lagger's episode is its one
    # unanswered action, truncated with no reward when it was dropped.
    late = [steps for steps in agents["fast"] if steps["agent_id"][0] == "late"]
    assert all(len(steps) <= (60 - 20) // 2 for steps in (s["rewards"] for s in late))
    lagger = [steps for steps in agents["slow"] if steps["agent_id"][0] == "lagger"]
    assert all(len(steps["rewards"]) == 1 and steps["truncated"][0] and steps["rewards"][0] == 0 for steps in lagger)


def _random_coins_per_player(episodes: int = 16, seed: int = 0) -> float:
    """Mean coins per player per episode with uniformly random moves on the config's arena."""
    config = load_config(CONFIG)
    mdp = make_mdp(**config.env.kwargs)
    rng = np.random.default_rng(seed)
    coins = []
    for episode in range(episodes):
        mdp.reset(seed=seed + episode)
        returns: dict[str, float] = {}
        while not mdp.episode_over:
            for agent in mdp.agent_ids():
                mdp.pending_actions.setdefault(agent, int(rng.integers(5)))
            for agent, outcome in mdp.tick().items():
                mdp.pending_actions.pop(agent, None)
                returns[str(agent)] = returns.get(str(agent), 0.0) + outcome.reward
        coins += returns.values()
    return float(np.mean(coins))


@pytest.mark.second_pass  # over 15 s on two cores
@pytest.mark.slow
def test_one_shared_policy_learns_to_collect_coins(tmp_path, capsys):
    """`lamarckian-hpc train configs/multiagent_async_arena.yaml`, seed 0, 40k frames."""
    random_coins = _random_coins_per_player()
    code = main(["train", str(CONFIG), "stop.total_env_steps=40000", f"storage.directory={tmp_path}",
                 "storage.run_name=arena", "runtime.device=cpu"])
    assert code == 0, capsys.readouterr().err[-2000:]
    with open_run(tmp_path / "arena.h5") as run:
        curve = run.metric("episode_return_mean.shared")
    print(f"random {random_coins:.2f}; " + ", ".join(
        f"{f:,}: {v:.2f}" for f, v in zip(curve.env_frames[::4], curve.value[::4])))
    # Measured: random moves collect about 1.7 coins per player per episode; the shared policy
    # about 12 at 40k frames (the recent mean of 100 player episodes).
    assert curve.value[-1] >= random_coins + 6, (random_coins, curve.value)
