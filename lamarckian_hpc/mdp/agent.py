"""What a controller holds: a handle on one agent of one MDP, and the two things it can await.

Controllers are plain `async def` coroutines, but they are not run by an asyncio event loop.
They await only two requests, a policy decision and an environment step, and the `Sampler`
answers them in bulk: all decisions of a tick in one batched inference per policy, all steps in
one tick of each MDP. An event loop would add a scheduling round trip per agent and step for no
gain, and it would hide the tick boundary at which batching happens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generator

import numpy as np

if TYPE_CHECKING:
    from .base import MDP, AgentId, StepOutcome


class Decision:
    """One row of a batched policy inference (slotted: one is made per agent per tick)."""

    __slots__ = ("action", "log_prob", "policy_version")

    def __init__(self, action: Any, log_prob: float, policy_version: int) -> None:
        self.action = action
        self.log_prob = log_prob
        self.policy_version = policy_version


class DecideRequest:
    """Awaiting it asks the policy `policy_id` to act on `observation`; the answer is a Decision."""

    __slots__ = ("policy_id", "observation")

    def __init__(self, policy_id: str, observation: np.ndarray) -> None:
        self.policy_id = policy_id
        self.observation = observation

    def __await__(self) -> Generator[DecideRequest, Decision, Decision]:
        return (yield self)


class StepRequest:
    """Awaiting it hands `action` to the MDP; the answer is the agent's StepOutcome after the tick."""

    __slots__ = ("action",)

    def __init__(self, action: Any) -> None:
        self.action = action

    def __await__(self) -> Generator[StepRequest, StepOutcome, StepOutcome]:
        return (yield self)


class AgentHandle:
    """One agent of one MDP as seen by its controller."""

    __slots__ = ("mdp", "agent_id", "env_index")

    def __init__(self, mdp: MDP, agent_id: AgentId, env_index: int) -> None:
        self.mdp = mdp
        self.agent_id = agent_id
        self.env_index = env_index

    def observation(self) -> np.ndarray:
        return self.mdp.observation(self.agent_id)

    def decide(self, policy_id: str, observation: np.ndarray) -> DecideRequest:
        """`await agent.decide(pid, obs)` -> Decision, answered by the tick's batched inference."""
        return DecideRequest(policy_id, observation)

    def step(self, action: Any) -> StepRequest:
        """`await agent.step(action)` -> StepOutcome, answered when the MDP has ticked."""
        return StepRequest(action)
