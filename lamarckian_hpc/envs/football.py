"""Google Research Football as a Gymnasium environment (`lamarckian/Football-v0`).

gfootball speaks the old gym API (`reset()` returns the observation, `step()` four values) and
pins `gym==0.25.2`, so it cannot be registered with Gymnasium directly; this wrapper translates
it, seeds the engine through `game_engine_random_seed`, and reports what a user of the academy
scenarios asks first, whether the episode ended in a goal (`info["scored"]`).

The engine is built only by the optional `football` extra (`tools/install_football.sh`); the id
is registered either way, and making it without the extra fails with that hint.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

ENV_ID = "lamarckian/Football-v0"
INSTALL_HINT = "Google Research Football is not installed: run tools/install_football.sh (the `football` extra)"
# Observations of the representations that are flat float vectors; pixel ones are not offered.
REPRESENTATION_SIZES = {"simple115v2": 115, "simple115": 115}


def football_available() -> bool:
    """True when the gfootball engine and its old gym can be imported."""
    try:
        # Old gym prints on import that it is unmaintained; that is known and pinned on purpose.
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            import gfootball.env  # noqa: F401
    except Exception:  # a half-built engine raises more than ImportError
        return False
    return True


class FootballEnv(gym.Env[np.ndarray, int]):
    """One controlled player of a gfootball scenario, with a flat float observation."""

    metadata = {"render_modes": []}

    def __init__(self, scenario: str = "academy_empty_goal_close", representation: str = "simple115v2",
                 rewards: str = "scoring") -> None:
        if representation not in REPRESENTATION_SIZES:
            raise ValueError(f"representation must be one of {sorted(REPRESENTATION_SIZES)}, got {representation!r}")
        if not football_available():
            raise ValueError(INSTALL_HINT)
        from gfootball.env import scenario_builder

        if scenario not in scenario_builder.all_scenarios():
            raise ValueError(f"unknown football scenario {scenario!r}; known: {', '.join(sorted(scenario_builder.all_scenarios()))}")
        self.scenario, self.representation, self.rewards = scenario, representation, rewards
        self.observation_space = spaces.Box(-np.inf, np.inf, (REPRESENTATION_SIZES[representation],), np.float32)
        self.action_space = spaces.Discrete(19)  # gfootball's default action set
        self._env: Any = None
        self._seed: int | None = None

    def _make(self, seed: int | None) -> None:
        import gfootball.env

        options = {} if seed is None else {"game_engine_random_seed": int(seed)}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # old gym's step-API notice
            self._env = gfootball.env.create_environment(
                env_name=self.scenario, representation=self.representation, rewards=self.rewards,
                render=False, other_config_options=options)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        if self._env is None or (seed is not None and seed != self._seed):
            # The engine takes its seed when it is made: a new seed needs a new engine.
            self.close()
            self._make(seed)
            self._seed = seed
        observation = self._env.reset()
        return np.asarray(observation, np.float32).reshape(-1), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        observation, reward, done, info = self._env.step(int(action))
        info = dict(info)
        score = float(info.get("score_reward", 0.0))
        info["scored"] = score > 0
        # gfootball ends an episode on a goal, on losing the ball or play stopping, and at the
        # scenario's step limit; only the last is a truncation (the learner bootstraps through it).
        core = self._env.unwrapped._env  # FootballEnvCore: the step counter and the scenario's limit
        truncated = bool(done) and core._step >= core._env.config.game_duration
        terminated = bool(done) and not truncated
        return np.asarray(observation, np.float32).reshape(-1), float(reward), terminated, truncated, info

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None


def register() -> None:
    if ENV_ID not in gym.registry:
        gym.register(ENV_ID, entry_point=FootballEnv)
