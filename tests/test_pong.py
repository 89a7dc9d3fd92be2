"""The built-in vector Pong: determinism, physics invariants, the scripted opponent, two players."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from lamarckian_hpc.envs import PongCore, PongEnv, PongRules, PongTwoPlayer, parallel_env, scripted_action
from lamarckian_hpc.envs.pong_core import DOWN, STAY, UP


def _play(env: PongEnv, actions: list[int], seed: int) -> tuple[np.ndarray, list[float], list[bool]]:
    observations, rewards, ends = [env.reset(seed=seed)[0]], [], []
    for action in actions:
        observation, reward, terminated, truncated, _ = env.step(action)
        observations.append(observation)
        rewards.append(reward)
        ends.append(terminated or truncated)
        if terminated or truncated:
            observations.append(env.reset()[0])
    return np.array(observations), rewards, ends


def test_same_seed_same_game_and_other_seed_other_game():
    actions = np.random.default_rng(0).integers(0, 3, 3000).tolist()
    first, rewards_a, _ = _play(PongEnv(), actions, seed=7)
    second, rewards_b, _ = _play(PongEnv(), actions, seed=7)
    other, _, _ = _play(PongEnv(), actions, seed=8)
    np.testing.assert_array_equal(first, second)
    assert rewards_a == rewards_b
    assert not np.array_equal(first[:100], other[:100])


def test_registered_id_makes_the_env():
    env = gym.make("lamarckian/Pong-v0", opponent_skill=0.3, points_to_win=2)
    observation, _ = env.reset(seed=0)
    assert observation.shape == (6,) and observation.dtype == np.float32
    assert env.action_space.n == 3
    assert env.unwrapped.opponent_skill == 0.3


def test_ball_stays_in_the_court_and_points_end_rallies():
    env = PongEnv(points_to_win=3, max_steps=100_000)
    env.reset(seed=1)
    rng = np.random.default_rng(1)
    core = env.core
    points = steps = 0
    terminated = False
    while not terminated:
        x_before = core.ball_x
        _, reward, terminated, truncated, info = env.step(int(rng.integers(0, 3)))
        steps += 1
        assert 0.0 <= core.ball_x <= 1.0 and 0.0 <= core.ball_y <= 1.0
        half = core.rules.paddle_half_height
        assert half <= core.left_y <= 1 - half and half <= core.right_y <= 1 - half
        assert env.observation_space.contains(env.core.view("right"))
        if reward != 0:
            points += 1
            assert info["point"] == reward
            # A point restarts the rally: the ball is served again from the centre line.
            assert core.ball_x == 0.5 and abs(x_before - 0.5) > 0.3
            assert (core.ball_vx > 0) == (reward < 0)  # the side that lost the point receives
    assert max(info["score"]) == 3 and sum(info["score"]) == points
    assert not truncated


def test_a_paddle_at_the_ball_returns_it_and_its_edge_aims_it():
    core = PongCore(PongRules(), np.random.default_rng(0))
    core.ball_x, core.ball_y, core.ball_vx, core.ball_vy = 0.98, 0.55, 0.03, 0.0
    core.right_y = 0.5
    assert core.step(STAY, STAY) == 0
    assert core.ball_vx < 0 and core.right_hits == 1
    assert core.ball_vy == pytest.approx(0.5 * core.rules.max_ball_vertical_speed, rel=1e-6)
    core.ball_x, core.ball_y, core.ball_vx, core.ball_vy = 0.98, 0.1, 0.03, 0.0
    core.right_y = 0.9
    assert core.step(STAY, STAY) == -1  # missed: a point for the left side
    assert core.left_score == 1


def test_step_info_reports_movement():
    env = PongEnv()
    env.reset(seed=0)
    _, _, _, _, info = env.step(UP)
    assert info["moved"] and info["paddle_delta"] == pytest.approx(env.rules.paddle_speed)
    _, _, _, _, info = env.step(STAY)
    assert not info["moved"] and info["paddle_delta"] == 0.0
    for _ in range(40):  # against the bottom wall the action still counts as a move, the paddle does not
        _, _, _, _, info = env.step(DOWN)
    assert info["moved"] and info["paddle_delta"] == 0.0


def _mean_return(policy, skill: float, episodes: int, seed: int) -> float:
    env = PongEnv(opponent_skill=skill)
    rng = np.random.default_rng(seed)
    returns = []
    for episode in range(episodes):
        env.reset(seed=seed + episode)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(policy(env, rng))
            total += reward
            done = terminated or truncated
        returns.append(total)
    return float(np.mean(returns))


def test_scripted_opponent_beats_a_random_policy_and_skill_matters():
    random_policy = lambda env, rng: int(rng.integers(0, 3))  # noqa: E731
    assert _mean_return(random_policy, 0.6, 10, seed=0) < -3.5
    # The scripted player on the agent's side: a stronger one beats a weaker one.
    tracker = lambda env, rng: scripted_action(env.core, "right", 1.0, rng)  # noqa: E731
    assert _mean_return(tracker, 0.3, 10, seed=0) > 2.0


def test_two_player_variant_mirrors_observations_and_rewards():
    env = parallel_env(points_to_win=2)
    observations, _ = env.reset(seed=3)
    assert set(observations) == {"left", "right"} == set(env.possible_agents)
    left, right = observations["left"], observations["right"]
    # Each side sees the ball mirrored and itself as the right paddle.
    assert left[0] == pytest.approx(-right[0]) and left[2] == pytest.approx(-right[2])
    assert left[4] == right[5] and left[5] == right[4]
    rng = np.random.default_rng(3)
    totals = {"left": 0.0, "right": 0.0}
    while env.agents:
        actions = {side: scripted_action(env.core, side, 1.0 if side == "left" else 0.2, rng) for side in env.agents}
        observations, rewards, terminations, truncations, infos = env.step(actions)
        assert rewards["left"] == -rewards["right"]
        for side in totals:
            totals[side] += rewards[side]
    assert terminations["left"] and terminations["right"]
    assert infos["left"]["score"] == (2, infos["right"]["score"][0]) and totals["left"] > 0
    with pytest.raises(RuntimeError, match="reset"):
        env.step({"left": 0, "right": 0})
    env.reset(seed=3)
    with pytest.raises(ValueError, match="missing"):
        env.step({"left": 0})


def test_two_player_is_deterministic_for_a_seed():
    def trace(seed: int) -> list[np.ndarray]:
        env = PongTwoPlayer()
        observations, _ = env.reset(seed=seed)
        rng = np.random.default_rng(0)
        out = []
        while env.agents:
            observations, *_ = env.step({side: int(rng.integers(0, 3)) for side in env.agents})
            out.append(observations["right"])
        return out

    np.testing.assert_array_equal(trace(5), trace(5))


def test_bad_settings_name_the_field():
    with pytest.raises(ValueError, match="opponent_skill"):
        PongEnv(opponent_skill=1.5)
    with pytest.raises(ValueError, match="points_to_win"):
        PongTwoPlayer(points_to_win=0)
