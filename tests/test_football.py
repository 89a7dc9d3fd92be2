"""Google Research Football through `lamarckian/Football-v0`: the wrapper and a short PPO run.

These run whenever the `football` extra is installed (`tools/install_football.sh`); CI installs
it and sets LAMARCKIAN_HPC_REQUIRE_FOOTBALL=1, so there a missing engine fails instead of skipping.
"""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from optional_parts import skip_unless_required

from lamarckian_hpc.config import load_config
from lamarckian_hpc.envs.football import INSTALL_HINT, FootballEnv, football_available
from lamarckian_hpc.runtime.runners.trainer import SerialTrainer

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
SHOT, RIGHT = 12, 5  # gfootball's default action set

if not football_available():
    skip_unless_required("football", INSTALL_HINT, module_level=True)


def _episode(env: FootballEnv, policy, seed: int | None) -> tuple[list[np.ndarray], float, bool, bool]:
    observation, _ = env.reset(seed=seed)
    observations, total = [observation], 0.0
    while True:
        observation, reward, terminated, truncated, info = env.step(policy(len(observations)))
        observations.append(observation)
        total += reward
        if terminated or truncated:
            return observations, total, info["scored"], truncated


def test_registered_id_gives_flat_observations_and_nineteen_actions():
    env = gym.make("lamarckian/Football-v0", scenario="academy_empty_goal_close")
    try:
        observation, _ = env.reset(seed=0)
        assert observation.shape == (115,) and observation.dtype == np.float32
        assert env.action_space.n == 19
        assert env.observation_space.contains(observation)
    finally:
        env.close()


def test_full_game_scenario_steps():
    env = FootballEnv("11_vs_11_easy_stochastic")
    try:
        observation, _ = env.reset(seed=0)
        for _ in range(20):
            observation, reward, terminated, truncated, _ = env.step(RIGHT)
            assert not (terminated or truncated)  # a full game lasts 3,000 steps
    finally:
        env.close()
    assert observation.shape == (115,) and np.isfinite(observation).all()


def test_same_seed_same_episode():
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 19, 400).tolist()
    env = FootballEnv("academy_empty_goal_close")
    try:
        first, *_ = _episode(env, lambda t: actions[t % 400], seed=3)
        second, *_ = _episode(env, lambda t: actions[t % 400], seed=3)
    finally:
        env.close()
    assert len(first) == len(second)
    np.testing.assert_array_equal(np.array(first), np.array(second))


def test_running_at_the_empty_goal_and_shooting_scores_and_ends_the_episode():
    env = FootballEnv("academy_empty_goal_close")
    try:
        steps, total, scored, truncated = _episode(env, lambda t: SHOT if t > 10 else RIGHT, seed=0)
        idle_steps, idle_total, idle_scored, _ = _episode(env, lambda t: 0, seed=0)
    finally:
        env.close()
    assert scored and total == 1.0 and not truncated and len(steps) < 100
    # Standing still never scores; the episode still ends, within the scenario's 400 steps.
    assert not idle_scored and idle_total == 0.0 and len(idle_steps) <= 401


def test_unknown_scenario_and_representation_name_the_choices():
    with pytest.raises(ValueError, match="academy_empty_goal_close"):
        FootballEnv("academy_nowhere")
    with pytest.raises(ValueError, match="simple115v2"):
        FootballEnv(representation="pixels")


@pytest.mark.slow
def test_ppo_learns_to_score_on_academy_empty_goal_close():
    config = load_config(CONFIGS / "ppo_football_empty_goal_close.yaml", ["stop.total_env_steps=60000"])
    trainer = SerialTrainer(config)
    try:
        result = trainer.train()
    finally:
        trainer.close()
    assert result.recent_return_mean >= 0.8, f"scoring rate {result.recent_return_mean} after {result.env_frames} frames"
