"""Vector Pong as a Gymnasium environment: the agent plays the right paddle against a scripted one.

It exists because ALE Pong steps about 1.7k times a second on one core, which makes a population
of PPO learners (PBT, EMOGI) take hours; this one steps tens of thousands of times a second, with a
6-float observation (see `PongCore.view`), actions stay/up/down, +1/-1 per point, and an episode
that ends when one side has `points_to_win` points or after `max_steps` steps (truncation).

Every step's `info` carries what behaviour objectives are computed from: `moved` (the action was
up or down), `paddle_delta` (how far the paddle actually moved; 0 against a wall), `hit` (the
agent returned the ball), `point` (+1, -1 or 0) and the running `score` of both sides.

`move_reward` and `stay_reward` add a behaviour term to the reward of every step the agent moves
(up or down) or stays: EMOGI trains each policy with its own weights on them (active or lazy
play), while `info["point"]` keeps the plain game outcome.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from .pong_core import STAY, PongCore, PongRules, scripted_action

OBSERVATION_SIZE = 6
OBSERVATION_BOUND = 2.0  # velocities are in [-1, 1] and positions in [-1, 1]; a margin for safety


def observation_space() -> spaces.Box:
    return spaces.Box(-OBSERVATION_BOUND, OBSERVATION_BOUND, (OBSERVATION_SIZE,), np.float32)


class PongEnv(gym.Env[np.ndarray, int]):
    """One-player vector Pong (`lamarckian/Pong-v0`); kwargs tune the opponent and the episode."""

    metadata = {"render_modes": []}

    def __init__(self, opponent_skill: float = 0.6, points_to_win: int = 5, max_steps: int = 3000,
                 paddle_speed: float = 0.04, ball_speed: float = 0.03, move_reward: float = 0.0,
                 stay_reward: float = 0.0) -> None:
        if not 0.0 <= opponent_skill <= 1.0:
            raise ValueError(f"opponent_skill must be in [0, 1], got {opponent_skill}")
        if points_to_win < 1 or max_steps < 1:
            raise ValueError(f"points_to_win and max_steps must be >= 1, got {points_to_win} and {max_steps}")
        self.opponent_skill = float(opponent_skill)
        self.points_to_win = int(points_to_win)
        self.max_steps = int(max_steps)
        self.move_reward, self.stay_reward = float(move_reward), float(stay_reward)
        self.rules = PongRules(paddle_speed=paddle_speed, ball_speed=ball_speed)
        self.observation_space = observation_space()
        self.action_space = spaces.Discrete(3)
        self.core: PongCore | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        if self.core is None:
            self.core = PongCore(self.rules, self.np_random)
        else:
            self.core.rng = self.np_random  # a new seed makes a new generator
            self.core.reset()
        return self.core.view("right"), {"score": (0, 0)}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        core = self.core
        if core is None:
            raise RuntimeError("call reset() before step()")
        action = int(action)
        before, hits = core.right_y, core.right_hits
        opponent = scripted_action(core, "left", self.opponent_skill, self.np_random)
        point = core.step(opponent, action)
        terminated = core.right_score >= self.points_to_win or core.left_score >= self.points_to_win
        truncated = not terminated and core.steps >= self.max_steps
        info = {"moved": action != STAY, "paddle_delta": abs(core.right_y - before), "hit": core.right_hits > hits,
                "point": point, "score": (core.right_score, core.left_score)}
        reward = point + (self.move_reward if action != STAY else self.stay_reward)
        return core.view("right"), float(reward), terminated, truncated, info


ENV_IDS = ("lamarckian/Pong-v0",)


def register() -> None:
    """Make `lamarckian/Pong-v0` known to gymnasium.make (idempotent)."""
    if "lamarckian/Pong-v0" not in gym.registry:
        gym.register("lamarckian/Pong-v0", entry_point="lamarckian_hpc.envs.pong:PongEnv")
