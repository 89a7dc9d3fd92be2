"""A PettingZoo parallel environment as an MDP of the asynchronous interface.

PettingZoo's parallel API steps all live agents at once with dicts keyed by agent id, and agents
leave (`env.agents` shrinks) or join (`env.agents` grows) between steps. That maps onto the MDP
interface directly: the present agents are `env.agents`, a tick is one `step` with the pending
actions of all of them, and an agent that vanished from `env.agents` without being terminated or
truncated gets a truncated final outcome, so its controller ends. The adapter does not import
pettingzoo: any object with the parallel API works (`reset`, `step`, `agents`, the space methods).
`global_state` is what a centralised critic reads (see `global_state.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from ..mdp import MDP, AgentId, StepOutcome


def one_hot(space: gym.spaces.Discrete) -> Callable[[Any], np.ndarray]:
    """Observation transform for Discrete observations (e.g. pettingzoo.classic rps_v2)."""
    size = int(space.n)

    def transform(observation: Any) -> np.ndarray:
        row = np.zeros(size, dtype=np.float32)
        row[int(observation)] = 1.0
        return row

    return transform


class ParallelEnvMDP(MDP):
    """Wraps a PettingZoo ParallelEnv; `observation_transform` turns raw observations into float arrays
    (by default: Discrete observations one-hot, as pettingzoo.classic's rps_v2 gives, anything else
    as it is)."""

    agents_join_mid_episode = True

    def __init__(self, env: Any, observation_transform: Callable[[Any], np.ndarray] | None = None) -> None:
        super().__init__()
        self.env = env
        agents = list(getattr(env, "possible_agents", []))
        space = env.observation_space(agents[0]) if agents else None
        if observation_transform is None and isinstance(space, gym.spaces.Discrete):
            observation_transform = one_hot(space)
        self.transform = observation_transform or (lambda obs: np.asarray(obs, dtype=np.float32))
        self._observations: dict[AgentId, np.ndarray] = {}
        self._agents: list[AgentId] = []
        #: Agents with an observation from the latest reset or step (the others are absent there).
        self._observed: set[AgentId] = set()
        self._env_has_state: bool | None = None  # looked up at the first call of global_state
        self._state_layout: list[tuple[AgentId, int]] = []  # (agent, observation size) of the concatenation

    def reset(self, seed: int | None = None) -> None:
        observations, _ = self.env.reset(seed=seed)
        self._observations = {agent: self.transform(obs) for agent, obs in observations.items()}
        self._observed = set(observations)
        self._agents = list(self.env.agents)
        self.pending_actions.clear()

    def agent_ids(self) -> list[AgentId]:
        return self._agents

    def observation(self, agent_id: AgentId) -> np.ndarray:
        return self._observations[agent_id]

    def ready(self) -> bool:
        return bool(self._agents) and all(agent in self.pending_actions for agent in self._agents)

    def tick(self) -> dict[AgentId, StepOutcome]:
        acting = self._agents
        actions = {agent: self.pending_actions[agent] for agent in acting}
        observations, rewards, terminations, truncations, infos = self.env.step(actions)
        for agent, obs in observations.items():
            self._observations[agent] = self.transform(obs)
        self._observed = set(observations)
        remaining = set(self.env.agents)
        outcomes: dict[AgentId, StepOutcome] = {}
        for agent in acting:
            terminated = bool(terminations.get(agent, False))
            truncated = bool(truncations.get(agent, False)) or (agent not in remaining and not terminated)
            outcomes[agent] = StepOutcome(self._observations[agent], float(rewards.get(agent, 0.0)), terminated,
                                          truncated, infos.get(agent))
        self._agents = [agent for agent in self.env.agents if not (terminations.get(agent) or truncations.get(agent))]
        return outcomes

    def global_state(self) -> np.ndarray:
        """The env's `state()` when it has a `state_space` (PettingZoo's mark of an env with a
        state); otherwise the observations of all `possible_agents` in that fixed order, zeros for an
        agent without one at this step."""
        if self._env_has_state is None:
            self._env_has_state = hasattr(self.env, "state_space")
        if self._env_has_state:
            return np.asarray(self.env.state(), dtype=np.float32).ravel()
        if not self._state_layout:
            self._state_layout = [(agent, gym.spaces.flatdim(self.env.observation_space(agent)))
                                  for agent in self.env.possible_agents]
        parts = []
        for agent, size in self._state_layout:
            observation = np.ravel(self._observations[agent]) if agent in self._observed else np.zeros(size, np.float32)
            if observation.size != size:
                raise ValueError(f"global state: agent {agent!r} observes {observation.size} floats after the "
                                 f"observation transform, but its space flattens to {size}")
            parts.append(observation)
        return np.concatenate(parts)

    def observation_space(self, agent_id: AgentId) -> gym.Space:
        return self.env.observation_space(agent_id)

    def action_space(self, agent_id: AgentId) -> gym.Space:
        return self.env.action_space(agent_id)

    def close(self) -> None:
        self.env.close()
