"""Controllers: coroutines that each drive one agent through one episode (paper Fig. 4b).

A training controller records experience for its policy and returns the episode's rewards; a
sparring controller (a scripted rule or a frozen policy) only acts and returns nothing. Which
agent gets which controller is decided by the sampler's controller factory, so the same MDP can
host a learner against a scripted opponent, two learners, or a learner and a frozen snapshot.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .agent import AgentHandle
from .base import AgentId
from .experience import ExperienceBuffer
from .recording import EpisodeSelector, RecordedSteps


@dataclass(frozen=True, slots=True)
class EpisodeResult:
    """What a training controller returns when its agent's episode ends."""

    agent_id: AgentId
    policy_id: str
    episode_return: float
    length: int
    terminated: bool
    recorded: RecordedSteps | None = None  # every step, when the episode was picked for the run file


class Controller(ABC):
    """Drives one agent; `run` is a coroutine that ends with the agent's episode.

    `run` may await only `agent.decide(...)` and `agent.step(...)`: the sampler, not an asyncio
    event loop, drives it, so asyncio primitives such as `asyncio.sleep` do not work inside.
    """

    @abstractmethod
    async def run(self, agent: AgentHandle) -> EpisodeResult | None: ...


class TrainingController(Controller):
    """Acts with a learning policy and records every step into the experience buffer; when the
    `selector` picks its episode, also keeps the whole episode for the run file."""

    def __init__(self, policy_id: str, experience: ExperienceBuffer, selector: EpisodeSelector | None = None) -> None:
        self.policy_id = policy_id
        self.experience = experience
        self.selector = selector

    async def run(self, agent: AgentHandle) -> EpisodeResult:
        fragment = self.experience.open()
        act, record, policy_id = agent.act, fragment.append, self.policy_id  # bound once: this loop is hot
        tape = self.selector.start() if self.selector is not None else None
        observation = agent.observation()
        episode_return, length = 0.0, 0
        try:
            while True:
                decision, outcome = await act(policy_id, observation)
                record(observation, decision, outcome)
                if tape is not None:
                    tape.append(observation, decision.action, outcome.reward, decision.policy_version)
                episode_return += outcome.reward
                length += 1
                if outcome.terminated or outcome.truncated:
                    break
                observation = outcome.observation
        except GeneratorExit:  # the episode was abandoned (its environment failed): keep none of it
            self.experience.discard(fragment)
            raise
        self.experience.finish(fragment, terminated=outcome.terminated)
        recorded = tape.finish(agent.agent_id, outcome.terminated) if tape is not None else None
        return EpisodeResult(agent.agent_id, self.policy_id, episode_return, length, outcome.terminated, recorded)


class FrozenPolicyController(Controller):
    """Sparring partner that acts with a policy that is not trained (a snapshot, a league member)."""

    def __init__(self, policy_id: str) -> None:
        self.policy_id = policy_id

    async def run(self, agent: AgentHandle) -> None:
        act, policy_id = agent.act, self.policy_id  # bound once: this loop is hot
        observation = agent.observation()
        while True:
            _, outcome = await act(policy_id, observation)
            if outcome.terminated or outcome.truncated:
                return None
            observation = outcome.observation


class ScriptedController(Controller):
    """Sparring partner driven by a plain function of the observation; needs no inference."""

    def __init__(self, act: Callable[[np.ndarray], Any]) -> None:
        self.act = act

    async def run(self, agent: AgentHandle) -> None:
        observation = agent.observation()
        while True:
            outcome = await agent.step(self.act(observation))
            if outcome.done:
                return None
            observation = outcome.observation
