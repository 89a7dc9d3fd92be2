"""A PettingZoo AEC (turn-based) environment as an MDP of the asynchronous interface.

In AEC only `agent_selection` acts per step. Mapped onto the MDP interface, an agent's step runs
from its move to its next turn: its action is consumed when it is its turn, and its outcome (the
observation at its next turn, and every reward it got in between) is answered only when its turn
comes again, or when it is done. So a waiting agent never decides on a stale board, and its
reward for the whole turn cycle is credited, the way `env.last()` credits it
(`_cumulative_rewards`, which holds what each agent got since it last acted). When the game
ends, every agent that moved gets its final outcome with its own result (+1 and -1 for a won
board game), before the finished agents are dead-stepped out of the env. An agent joins (gets a
controller) at its first turn.

Observations of classic games are dicts {"observation", "action_mask"}: an agent's row is the
flattened observation then the mask (floats), and its action space a `MaskedDiscrete`, which is
how every policy finds the mask (`mdp.action_masks`). Actions outside the mask handed out are
counted in `illegal_actions` (a masked policy never plays one). The adapter does not import
pettingzoo: any object with the AEC API works (`reset`, `step`, `observe`, `agent_selection`,
`agents`, `terminations`, `truncations`, `infos`, `_cumulative_rewards`, the space methods).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from ..mdp import MDP, AgentId, StepOutcome
from ..mdp.action_masks import MaskedDiscrete
from .pettingzoo_adapter import one_hot


class AECEnvMDP(MDP):
    """Wraps a PettingZoo AECEnv (e.g. `pettingzoo.classic.connect_four_v3.env()`)."""

    agents_join_mid_episode = True

    def __init__(self, env: Any) -> None:
        super().__init__()
        self.env = env
        first = env.possible_agents[0]
        space = env.observation_space(first)
        self.masked = isinstance(space, gym.spaces.Dict) and "action_mask" in space.spaces
        inner = space["observation"] if self.masked else space
        self._one_hot = one_hot(inner) if isinstance(inner, gym.spaces.Discrete) else None
        self._present: list[AgentId] = []
        self._waiting: set[AgentId] = set()  # moved, awaiting the outcome of their move
        self._legal: dict[AgentId, np.ndarray] = {}  # the mask each agent was last handed
        #: Actions played outside the mask their agent was handed (the env then ends the game).
        self.illegal_actions = 0

    def _row(self, agent: AgentId) -> np.ndarray:
        raw = self.env.observe(agent)
        observation = raw["observation"] if self.masked else raw
        flat = self._one_hot(observation) if self._one_hot is not None else \
            np.ravel(np.asarray(observation)).astype(np.float32)
        if not self.masked:
            return flat
        mask = np.asarray(raw["action_mask"], dtype=np.float32)
        self._legal[agent] = mask
        return np.concatenate([flat, mask])

    def reset(self, seed: int | None = None) -> None:
        self.env.reset(seed=seed)
        self.pending_actions.clear()
        self._present, self._waiting = [], set()
        self._answer({})

    def agent_ids(self) -> list[AgentId]:
        return self._present

    def observation(self, agent_id: AgentId) -> np.ndarray:
        return self._row(agent_id)

    def ready(self) -> bool:
        return bool(self.env.agents) and self.env.agent_selection in self.pending_actions

    def tick(self) -> dict[AgentId, StepOutcome]:
        agent = self.env.agent_selection
        action = self.pending_actions.pop(agent)  # consumed now; its outcome comes at its next turn
        legal = self._legal.get(agent)
        if legal is not None and not legal[int(action)]:
            self.illegal_actions += 1
        self.env.step(action)
        self._waiting.add(agent)
        outcomes: dict[AgentId, StepOutcome] = {}
        self._answer(outcomes)
        return outcomes

    def _answer(self, outcomes: dict[AgentId, StepOutcome]) -> None:
        """Walk to the next agent that acts: answer the waiting agents whose turn it is or who are
        done, seat newcomers, dead-step the finished agents out of the env."""
        env = self.env
        while env.agents:
            agent = env.agent_selection
            terminated, truncated = bool(env.terminations[agent]), bool(env.truncations[agent])
            if agent in self._waiting:
                self._waiting.discard(agent)
                outcomes[agent] = StepOutcome(self._row(agent), float(env._cumulative_rewards[agent]), terminated,
                                              truncated, env.infos.get(agent))
            if not (terminated or truncated):
                if agent not in self._present:
                    self._present.append(agent)
                return
            if agent in self._present:
                self._present.remove(agent)
            env.step(None)
        self._present = []  # the game is over: every agent that moved has its final outcome

    def observation_space(self, agent_id: AgentId) -> gym.Space:
        space = self.env.observation_space(agent_id)
        if not self.masked:
            return gym.spaces.Box(-np.inf, np.inf, (gym.spaces.flatdim(space),), np.float32)
        size = gym.spaces.flatdim(space["observation"]) + int(self.env.action_space(agent_id).n)
        return gym.spaces.Box(-np.inf, np.inf, (size,), np.float32)

    def action_space(self, agent_id: AgentId) -> gym.Space:
        space = self.env.action_space(agent_id)
        return MaskedDiscrete(int(space.n), start=int(space.start)) if self.masked else space

    def close(self) -> None:
        self.env.close()
