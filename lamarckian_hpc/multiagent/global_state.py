"""The rows a centralised critic trains on: each agent's observation with the global state appended.

Centralised training with decentralised execution (MAPPO, RLlib's centralized-critic example)
needs the critic to see the global state at every recorded step and at every bootstrap. Rather
than give the sampler, the controllers and the experience buffer a second observation stream,
this wrapper widens the one they already carry: every observation it hands out, at a reset and
in every step outcome, is [own observation | global state], computed once per tick. Recording,
batching, GAE and the PPO update then work unchanged; the model's policy reads only the own part
(`ActorCritic.own`), so acting never depends on what other agents observe.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from ..mdp import MDP, AgentId, StepOutcome


class GlobalStateMDP(MDP):
    """Wraps an MDP that has a `global_state()` method (e.g. `ParallelEnvMDP`)."""

    def __init__(self, mdp: MDP) -> None:
        super().__init__()
        if not callable(getattr(mdp, "global_state", None)):
            raise ValueError(f"multiagent.centralized_critic: {type(mdp).__name__} provides no global_state(); "
                             "wrap PettingZoo parallel environments in ParallelEnvMDP")
        self.mdp = mdp
        self.pending_actions = mdp.pending_actions  # one dict: the sampler's actions reach the inner MDP
        self.agents_join_mid_episode = mdp.agents_join_mid_episode
        self._state: np.ndarray | None = None

    def _global(self) -> np.ndarray:
        if self._state is None:
            self._state = np.asarray(self.mdp.global_state(), dtype=np.float32).ravel()  # type: ignore[attr-defined]
        return self._state

    @property
    def state_size(self) -> int:
        return int(self._global().size)

    def _widen(self, observation: np.ndarray) -> np.ndarray:
        return np.concatenate([np.ravel(observation).astype(np.float32, copy=False), self._global()])

    def reset(self, seed: int | None = None) -> None:
        self.mdp.reset(seed=seed)
        self._state = None

    def agent_ids(self) -> list[AgentId]:
        return self.mdp.agent_ids()

    def observation(self, agent_id: AgentId) -> np.ndarray:
        return self._widen(self.mdp.observation(agent_id))

    def ready(self) -> bool:
        return self.mdp.ready()

    def tick(self) -> dict[AgentId, StepOutcome]:
        outcomes = self.mdp.tick()
        self._state = None
        for outcome in outcomes.values():
            outcome.observation = self._widen(outcome.observation)
        return outcomes

    def observation_space(self, agent_id: AgentId) -> gym.Space:
        size = gym.spaces.flatdim(self.mdp.observation_space(agent_id)) + self.state_size
        return gym.spaces.Box(-np.inf, np.inf, (size,), np.float32)

    def action_space(self, agent_id: AgentId) -> gym.Space:
        return self.mdp.action_space(agent_id)

    def close(self) -> None:
        self.mdp.close()

