"""The MDP side of the asynchronous MDP interface: one environment, the agents present in it,
and one step of its clock.

An `MDP` knows nothing about policies or learning. Controllers (see `controllers.py`) drive its
agents as coroutines and the `Sampler` decides when to advance it. Agents may appear and
disappear between ticks, which is what multi-agent games and games with drop-in players need;
a single-agent Gymnasium environment is the special case of one agent that lives for one episode.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable
from typing import Any

import gymnasium as gym
import numpy as np

AgentId = Hashable


class StepOutcome:
    """What one agent gets back after the MDP consumed its action.

    A plain slotted class rather than a dataclass: one is made per agent per tick, and a frozen
    dataclass costs several times as much to construct.
    """

    __slots__ = ("observation", "reward", "terminated", "truncated", "info")

    def __init__(self, observation: np.ndarray, reward: float, terminated: bool, truncated: bool,
                 info: dict[str, Any] | None = None) -> None:
        self.observation = observation
        self.reward = reward
        self.terminated = terminated
        self.truncated = truncated
        self.info = info if info is not None else {}

    @property
    def done(self) -> bool:
        """The agent's episode is over (it terminated, was truncated or left the game)."""
        return self.terminated or self.truncated

    def __repr__(self) -> str:
        return (f"StepOutcome(reward={self.reward!r}, terminated={self.terminated}, truncated={self.truncated})")


class MDP(ABC):
    """One environment and the agents currently in it.

    Subclasses implement `reset`, `agent_ids`, `observation`, `tick` and the spaces. The sampler
    calls `set_action` as controllers decide, `ready` to ask whether the clock should advance,
    and `tick` to advance it. A synchronous game advances once every present agent has acted
    (the default `ready`); an asynchronous game overrides `ready` to advance on its own clock
    and answers only the agents whose actions it consumed.
    """

    #: Whether agents can appear mid-episode; when False the sampler looks for new agents only
    #: after a reset, which saves a scan per tick for single-agent environments.
    agents_join_mid_episode: bool = True

    def __init__(self) -> None:
        self.pending_actions: dict[AgentId, Any] = {}

    @abstractmethod
    def reset(self, seed: int | None = None) -> None:
        """Start a new episode."""

    @abstractmethod
    def agent_ids(self) -> list[AgentId]:
        """Agents present now; new ids get a controller, vanished ids have left."""

    @abstractmethod
    def observation(self, agent_id: AgentId) -> np.ndarray:
        """The current observation of a present agent."""

    @abstractmethod
    def tick(self) -> dict[AgentId, StepOutcome]:
        """Advance the clock using `pending_actions`; return the outcome of every consumed action.

        An agent that leaves during the tick must get an outcome with `terminated` or `truncated`
        set, so that its controller can finish.
        """

    @abstractmethod
    def observation_space(self, agent_id: AgentId) -> gym.Space:
        """Observation space of an agent."""

    @abstractmethod
    def action_space(self, agent_id: AgentId) -> gym.Space:
        """Action space of an agent."""

    @property
    def episode_over(self) -> bool:
        """No agent is left: the sampler resets the MDP."""
        return not self.agent_ids()

    def set_action(self, agent_id: AgentId, action: Any) -> None:
        self.pending_actions[agent_id] = action

    def ready(self) -> bool:
        """Advance once every present agent has an action (a synchronous game)."""
        return len(self.pending_actions) >= len(self.agent_ids())

    def close(self) -> None:  # noqa: B027 (optional: most environments hold nothing to release)
        """Release the environment's resources."""
