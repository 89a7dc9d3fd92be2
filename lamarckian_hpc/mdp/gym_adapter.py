"""Any Gymnasium environment id as a one-agent MDP, with discrete or continuous actions.

The adapter does not auto-reset: the episode's last outcome carries the true final observation,
which the learner needs to bootstrap a truncated episode, and the sampler resets the MDP once its
agent is gone. The built-in `lamarckian/` ids are registered by importing `lamarckian_hpc.envs`,
as the runtime does: the MDP interface knows no environment.
"""

from __future__ import annotations

import importlib
from typing import Any

import gymnasium as gym
import numpy as np

from . import fault_injection
from .base import MDP, AgentId, StepOutcome

AGENT_ID = "agent_0"


def import_env_module(env_id: str) -> None:
    """Import the module of a `module:Id` env id (Gymnasium's own convention: gymnasium.make imports
    it, and it registers the id), so that a missing or broken module is one line naming it."""
    module, colon, _ = env_id.partition(":")
    if not colon or not module:
        return
    try:
        importlib.import_module(module)
    except Exception as error:  # noqa: BLE001 - any failure of the user's module is reported as one line
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        if not isinstance(error, ImportError):
            reason = f"{type(error).__name__}: {reason}"
        file = module.replace(".", "/") + ".py"
        raise ValueError(f"env.id: cannot import module {module!r} (from {env_id}): {reason}; run from the folder "
                         f"that holds {file} or install it") from None


def make_gym_env(env_id: str, kwargs: dict[str, Any] | None = None, max_episode_steps: int | None = None) -> gym.Env:
    """gymnasium.make with a readable error for unknown ids."""
    fault_injection.register()
    import_env_module(env_id)
    try:
        return gym.make(env_id, max_episode_steps=max_episode_steps, **(kwargs or {}))
    except (gym.error.Error, TypeError) as error:
        raise ValueError(f"cannot make Gymnasium environment {env_id!r}: {error}") from None


class GymMDP(MDP):
    """One Gymnasium environment driven by a single agent, `agent_0`."""

    agents_join_mid_episode = False

    def __init__(self, env: gym.Env) -> None:
        super().__init__()
        self.env = env
        space = env.action_space
        if not isinstance(space, (gym.spaces.Discrete, gym.spaces.Box)):
            raise ValueError(f"unsupported action space {space}; supported: Discrete, Box")
        self._low = space.low if isinstance(space, gym.spaces.Box) else None
        self._high = space.high if isinstance(space, gym.spaces.Box) else None
        self._observation: np.ndarray | None = None
        self._outcomes: dict[AgentId, StepOutcome] = {}  # reused: the sampler reads it within the tick
        self._alive = False

    def reset(self, seed: int | None = None) -> None:
        self._observation, _ = self.env.reset(seed=seed)
        if seed is not None:
            self.env.action_space.seed(seed)
        self._alive = True
        self.pending_actions.clear()

    def agent_ids(self) -> list[AgentId]:
        return [AGENT_ID] if self._alive else []

    @property
    def episode_over(self) -> bool:
        return not self._alive

    def ready(self) -> bool:
        return AGENT_ID in self.pending_actions

    def observation(self, agent_id: AgentId) -> np.ndarray:
        assert self._observation is not None
        return self._observation

    def tick(self) -> dict[AgentId, StepOutcome]:
        action = self.pending_actions[AGENT_ID]
        if self._low is not None:
            action = np.minimum(np.maximum(action, self._low), self._high)  # np.clip costs 3x for one row
        observation, reward, terminated, truncated, info = self.env.step(action)
        self._observation = observation
        if terminated or truncated:
            self._alive = False
        self._outcomes[AGENT_ID] = StepOutcome(observation, float(reward), bool(terminated), bool(truncated), info)
        return self._outcomes

    def observation_space(self, agent_id: AgentId) -> gym.Space:
        return self.env.observation_space

    def action_space(self, agent_id: AgentId) -> gym.Space:
        return self.env.action_space

    def close(self) -> None:
        self.env.close()
