"""Steps a batch of MDPs in one process with one batched policy inference per policy per tick.

The sampler is the event loop of the asynchronous MDP interface. Each tick it
1. answers every pending decision with one inference per policy over all agents and MDPs,
2. advances every MDP that is ready and hands each agent its outcome,
3. starts controllers for agents that appeared and resets MDPs whose agents are all gone.
Controllers run between those points until they await again, so a tick costs one inference call
per policy however many environments and agents there are.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Coroutine, Mapping, Protocol, Sequence

import numpy as np

from .agent import AgentHandle, DecideRequest, Decision, StepRequest
from .base import MDP, AgentId
from .controllers import Controller, EpisodeResult


@dataclass(frozen=True, slots=True)
class PolicyOutput:
    """A batched inference: one row per observation."""

    actions: np.ndarray
    log_probs: np.ndarray


class Policy(Protocol):
    def __call__(self, observations: np.ndarray) -> PolicyOutput: ...


ControllerFactory = Callable[[int, AgentId], Controller]


class _Slot:
    """A running controller: its coroutine and the agent it drives."""

    __slots__ = ("coroutine", "handle")

    def __init__(self, coroutine: Coroutine[Any, Any, Any], handle: AgentHandle) -> None:
        self.coroutine = coroutine
        self.handle = handle


class Sampler:
    """Runs the controllers of `mdps`; `policies` maps policy ids to batched inference functions."""

    def __init__(
        self,
        mdps: Sequence[MDP],
        controller_factory: ControllerFactory,
        policies: Mapping[str, Policy],
        seed: int = 0,
    ) -> None:
        self.mdps = list(mdps)
        self.controller_factory = controller_factory
        self.policies = dict(policies)
        self.policy_versions: dict[str, int] = {policy_id: 0 for policy_id in self.policies}
        self.env_frames = 0
        self.completed: list[EpisodeResult] = []
        self._live: list[dict[AgentId, _Slot]] = [{} for _ in self.mdps]
        self._decisions: dict[str, list[tuple[_Slot, np.ndarray]]] = defaultdict(list)
        for index, mdp in enumerate(self.mdps):
            mdp.reset(seed=seed + 7919 * index)
            self._join_new_agents(index)

    # ------------------------------------------------------------------ driving coroutines
    def _resume(self, slot: _Slot, value: Any) -> None:
        try:
            request = slot.coroutine.send(value)
        except StopIteration as stop:
            del self._live[slot.handle.env_index][slot.handle.agent_id]
            if isinstance(stop.value, EpisodeResult):
                self.completed.append(stop.value)
            return
        if type(request) is DecideRequest:
            self._decisions[request.policy_id].append((slot, request.observation))
        elif type(request) is StepRequest:
            slot.handle.mdp.set_action(slot.handle.agent_id, request.action)
        else:
            raise TypeError(
                f"a controller awaited {request!r}; controllers may await only agent.decide(...) and agent.step(...)"
            )

    def _join_new_agents(self, index: int) -> None:
        mdp, live = self.mdps[index], self._live[index]
        for agent_id in mdp.agent_ids():
            if agent_id not in live:
                handle = AgentHandle(mdp, agent_id, index)
                slot = _Slot(self.controller_factory(index, agent_id).run(handle), handle)
                live[agent_id] = slot
                self._resume(slot, None)

    # ------------------------------------------------------------------ one tick
    def _infer(self) -> None:
        while self._decisions:
            pending, self._decisions = self._decisions, defaultdict(list)
            for policy_id, requests in pending.items():
                policy = self.policies.get(policy_id)
                if policy is None:
                    raise KeyError(f"unknown policy id {policy_id!r}; known: {sorted(self.policies)}")
                output = policy(np.stack([observation for _, observation in requests]))
                version = self.policy_versions[policy_id]
                actions = output.actions.tolist()  # plain Python values: cheaper to index and to check
                log_probs = output.log_probs.tolist()
                for row, (slot, _) in enumerate(requests):
                    self._resume(slot, Decision(actions[row], log_probs[row], version))

    def tick(self) -> None:
        """Advance every MDP by one step of its clock."""
        self._infer()
        for index, mdp in enumerate(self.mdps):
            if not mdp.ready():
                continue
            outcomes = mdp.tick()
            self.env_frames += 1
            live = self._live[index]
            for agent_id, outcome in outcomes.items():
                mdp.pending_actions.pop(agent_id, None)
                slot = live.get(agent_id)
                if slot is not None:
                    self._resume(slot, outcome)
            if mdp.episode_over:
                self._abandon_left_agents(index)
                mdp.reset()
                self._join_new_agents(index)
            elif mdp.agents_join_mid_episode:
                self._join_new_agents(index)

    def _abandon_left_agents(self, index: int) -> None:
        """Controllers of agents that vanished without a final outcome break the MDP contract."""
        live = self._live[index]
        if live:
            for slot in live.values():
                slot.coroutine.close()
            names = sorted(map(str, live))
            live.clear()
            raise RuntimeError(
                f"MDP {type(self.mdps[index]).__name__} ended its episode without a final outcome for agents {names}"
            )

    def run_until(self, done: Callable[[], bool]) -> None:
        while not done():
            self.tick()

    def take_completed(self) -> list[EpisodeResult]:
        completed, self.completed = self.completed, []
        return completed

    def close(self) -> None:
        for live in self._live:
            for slot in live.values():
                slot.coroutine.close()
            live.clear()
        for mdp in self.mdps:
            mdp.close()
