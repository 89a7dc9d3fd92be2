"""Two-player vector Pong with PettingZoo's parallel API, for self-play.

Both paddles are controlled: `step` takes {"left": action, "right": action} and returns dicts of
observations, rewards (+1 to the side that scored, -1 to the other), terminations, truncations and
infos keyed by the same ids. Each side sees the court mirrored so that it plays on the right
(`PongCore.view`), so a policy trained by `PongEnv` plays either side as it is.

`PongTwoPlayer` is a `pettingzoo.ParallelEnv` (so PettingZoo's `parallel_api_test` and
`parallel_seed_test` run on it, tests/test_peer_env_checks.py) wherever pettingzoo is installed:
the `multiagent` and `test` extras bring it. A core install, which plays the league with this game
too, has no pettingzoo; there the class stands alone with the same attributes and methods.
`reset(seed=s)` makes a new generator from `s`; `reset()` continues the current one (a first
`reset()` draws fresh entropy), as Gymnasium's environments do.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from .pong import observation_space
from .pong_core import STAY, PongCore, PongRules

try:
    from pettingzoo.utils.env import ParallelEnv
except ImportError:  # pettingzoo is optional (the multiagent extra); the league runs without it
    ParallelEnv = object  # type: ignore[assignment,misc]

PLAYERS = ("left", "right")


class PongTwoPlayer(ParallelEnv):  # type: ignore[misc,valid-type]
    metadata = {"name": "lamarckian_pong_two_player_v0", "render_modes": [], "is_parallelizable": True}
    #: No render modes: `render()` draws nothing (analysis/replay.py draws recorded games).
    render_mode = None

    def __init__(self, points_to_win: int = 5, max_steps: int = 3000, paddle_speed: float = 0.04,
                 ball_speed: float = 0.03) -> None:
        if points_to_win < 1 or max_steps < 1:
            raise ValueError(f"points_to_win and max_steps must be >= 1, got {points_to_win} and {max_steps}")
        self.points_to_win, self.max_steps = int(points_to_win), int(max_steps)
        self.rules = PongRules(paddle_speed=paddle_speed, ball_speed=ball_speed)
        self.possible_agents = list(PLAYERS)
        self.agents: list[str] = []
        self._observation_space = observation_space()
        self._action_space = spaces.Discrete(3)
        self.core: PongCore | None = None

    def observation_space(self, agent: str) -> spaces.Box:
        return self._observation_space

    def action_space(self, agent: str) -> spaces.Discrete:
        return self._action_space

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
        if seed is not None or self.core is None:
            self.core = PongCore(self.rules, np.random.default_rng(seed))
        else:
            self.core.reset()
        self.agents = list(PLAYERS)
        return {side: self.core.view(side) for side in PLAYERS}, {side: {} for side in PLAYERS}

    def step(self, actions: dict[str, int]) -> tuple[dict[str, np.ndarray], dict[str, float], dict[str, bool],
                                                     dict[str, bool], dict[str, dict]]:
        core = self.core
        if core is None or not self.agents:
            raise RuntimeError("call reset() before step(), and again after the episode ended")
        missing = set(PLAYERS) - set(actions)
        if missing:
            raise ValueError(f"step needs an action for every player; missing {sorted(missing)}")
        left, right = int(actions["left"]), int(actions["right"])
        before = {"left": core.left_y, "right": core.right_y}
        point = core.step(left, right)
        terminated = core.left_score >= self.points_to_win or core.right_score >= self.points_to_win
        truncated = not terminated and core.steps >= self.max_steps
        after = {"left": core.left_y, "right": core.right_y}
        moved = {"left": left != STAY, "right": right != STAY}
        score = {"left": (core.left_score, core.right_score), "right": (core.right_score, core.left_score)}
        rewards = {"right": float(point), "left": float(-point)}
        infos = {side: {"moved": moved[side], "paddle_delta": abs(after[side] - before[side]),
                        "point": int(rewards[side]), "score": score[side]} for side in PLAYERS}
        observations = {side: core.view(side) for side in PLAYERS}
        if terminated or truncated:
            self.agents = []
        return (observations, rewards, {side: terminated for side in PLAYERS},
                {side: truncated for side in PLAYERS}, infos)

    def render(self) -> None:
        return None

    def close(self) -> None:
        pass


def parallel_env(**kwargs: Any) -> PongTwoPlayer:
    """PettingZoo's constructor name for parallel environments."""
    return PongTwoPlayer(**kwargs)
