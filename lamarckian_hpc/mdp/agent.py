"""What a controller holds: a handle on one agent of one MDP, and the three things it can await.

Controllers are plain `async def` coroutines, but they are not run by an asyncio event loop.
They await only a policy decision, an environment step, or both at once, and the `Sampler`
answers them in bulk: all decisions of a tick in one batched inference per policy, all steps in
one tick of each MDP. An event loop would add a scheduling round trip per agent and step for no
gain, and it would hide the tick boundary at which batching happens.

The awaitables are generator-based coroutines that yield a small tuple, (kind, ...), to the
sampler: the cheapest suspension Python has, which matters at one suspension per agent per tick.
"""

from __future__ import annotations

import types
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .base import MDP, AgentId, StepOutcome

#: Kinds of request a controller can yield to the sampler (the first item of the tuple).
DECIDE, ACT, STEP = "decide", "act", "step"


class Decision:
    """One row of a batched policy inference (slotted: one is made per agent per tick)."""

    __slots__ = ("action", "log_prob", "policy_version")

    def __init__(self, action: Any, log_prob: float, policy_version: int) -> None:
        self.action = action
        self.log_prob = log_prob
        self.policy_version = policy_version

    def __repr__(self) -> str:
        return f"Decision(action={self.action!r}, log_prob={self.log_prob:.4f}, policy_version={self.policy_version})"


class AgentHandle:
    """One agent of one MDP as seen by its controller."""

    __slots__ = ("mdp", "agent_id", "env_index")

    def __init__(self, mdp: MDP, agent_id: AgentId, env_index: int) -> None:
        self.mdp = mdp
        self.agent_id = agent_id
        self.env_index = env_index

    def observation(self) -> np.ndarray:
        return self.mdp.observation(self.agent_id)

    @staticmethod
    @types.coroutine
    def decide(policy_id: str, observation: np.ndarray) -> Generator[tuple, Decision, Decision]:
        """`await agent.decide(pid, obs)` -> Decision, answered by the tick's batched inference."""
        return (yield (DECIDE, policy_id, observation))

    @staticmethod
    @types.coroutine
    def act(policy_id: str, observation: np.ndarray) -> Generator[tuple, tuple, tuple[Decision, StepOutcome]]:
        """`await agent.act(pid, obs)` -> (Decision, StepOutcome): decide, then step with that action
        without a stop in between. The common path of a controller: one suspension per tick."""
        return (yield (ACT, policy_id, observation))

    @staticmethod
    @types.coroutine
    def step(action: Any) -> Generator[tuple, StepOutcome, StepOutcome]:
        """`await agent.step(action)` -> StepOutcome, answered when the MDP has ticked."""
        return (yield (STEP, action))
