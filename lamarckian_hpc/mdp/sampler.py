"""Steps a batch of MDPs in one process with one batched policy inference per policy per tick.

The sampler is the event loop of the asynchronous MDP interface. Each tick it
1. answers every pending decision with one inference per policy over all agents and MDPs,
2. advances every MDP that is ready and hands each agent its outcome,
3. starts controllers for agents that appeared and resets MDPs whose agents are all gone.
Controllers run between those points until they await again, so a tick costs one inference call
per policy however many environments and agents there are.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from .agent import ACT, DECIDE, STEP, AgentHandle, Decision
from .base import MDP, AgentId
from .controllers import Controller, EpisodeResult
from .gc_pause import gc_paused


class PolicyOutput:
    """A batched inference: one row per observation."""

    __slots__ = ("actions", "log_probs")

    def __init__(self, actions: np.ndarray, log_probs: np.ndarray) -> None:
        self.actions = actions
        self.log_probs = log_probs


class Policy(Protocol):
    def __call__(self, observations: np.ndarray) -> PolicyOutput: ...


ControllerFactory = Callable[[int, AgentId], Controller]
log = logging.getLogger(__name__)
#: Environment errors logged with their traceback; later ones are only counted.
LOGGED_ENV_ERRORS = 5


class EnvironmentFailingError(RuntimeError):
    """Every episode of late has ended in an environment error: sampling cannot produce
    experience, so the caller stops instead of dropping episodes for ever. One line."""


def _rows(actions: np.ndarray) -> list[Any]:
    """Per-agent actions: Python ints for discrete actions (environments check them fastest),
    array rows for continuous ones (they keep their dtype and clip without conversion)."""
    return actions.tolist() if actions.dtype.kind in "biu" else list(actions)


def _stack(observations: list[Any]) -> np.ndarray:
    """One batch from per-agent observations. `np.array` on a list of equal-shaped arrays gives
    what `np.stack` gives, about three times faster for many small rows, and ragged rows still fail."""
    return np.array(observations)


class _Slot:
    """A running controller: its coroutine, the agent it drives and what it awaits now."""

    __slots__ = ("coroutine", "handle", "request", "decision")

    def __init__(self, coroutine: Coroutine[Any, Any, Any], handle: AgentHandle) -> None:
        self.coroutine = coroutine
        self.handle = handle
        self.request: tuple = ()  # the ACT or DECIDE request waiting for this tick's inference
        self.decision: Decision | None = None  # set while an ActRequest waits for its step


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
        self.env_errors = 0  # episodes dropped because their environment raised
        self.consecutive_env_errors = 0  # since an episode last ended normally
        self.last_env_error = ""  # "Type: message" of the latest environment error
        self.completed: list[EpisodeResult] = []
        self._live: list[dict[AgentId, _Slot]] = [{} for _ in self.mdps]
        #: Slots waiting for an inference, grouped by policy id in the order they asked.
        self._decisions: dict[str, list[_Slot]] = {}
        with gc_paused():
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
        kind = request[0] if type(request) is tuple else None
        if kind is ACT or kind is DECIDE:
            slot.request = request
            waiting = self._decisions.get(request[1])
            if waiting is None:
                self._decisions[request[1]] = [slot]
            else:
                waiting.append(slot)
        elif kind is STEP:
            slot.handle.mdp.set_action(slot.handle.agent_id, request[1])
        else:
            raise TypeError(
                f"a controller awaited {request!r}; controllers may await only agent.act(...), "
                "agent.decide(...) and agent.step(...)"
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
            pending, self._decisions = self._decisions, {}
            for policy_id, slots in pending.items():
                policy = self.policies.get(policy_id)
                if policy is None:
                    raise KeyError(f"unknown policy id {policy_id!r}; known: {sorted(self.policies)}")
                requests = [slot.request for slot in slots]
                output = policy(_stack([request[2] for request in requests]))
                version = self.policy_versions[policy_id]
                actions = _rows(output.actions)
                log_probs = output.log_probs.tolist()
                for slot, request, action, log_prob in zip(slots, requests, actions, log_probs):
                    decision = Decision(action, log_prob, version)
                    if request[0] is ACT:
                        slot.decision = decision
                        handle = slot.handle
                        handle.mdp.set_action(handle.agent_id, action)
                    else:
                        self._resume(slot, decision)

    def tick(self) -> None:
        """Advance every MDP by one step of its clock.

        The cyclic garbage collector is paused for the tick (see `gc_pause.py`): left running at
        10,000 agents, it took about 40% of the time scanning live controllers.
        """
        with gc_paused():
            self._tick()

    def _tick(self) -> None:
        self._infer()
        resume = self._resume
        for index, (mdp, live) in enumerate(zip(self.mdps, self._live)):
            if not mdp.ready():
                continue
            try:
                outcomes = mdp.tick()
            except Exception as error:  # a game server bug must not take the actor down
                self._drop_episode(index, error)
                continue
            self.env_frames += 1
            pending = mdp.pending_actions
            for agent_id, outcome in outcomes.items():
                pending.pop(agent_id, None)
                slot = live.get(agent_id)
                if slot is None:
                    continue
                decision = slot.decision
                if decision is None:
                    resume(slot, outcome)
                else:
                    slot.decision = None
                    resume(slot, (decision, outcome))
            if mdp.episode_over:
                self._abandon_left_agents(index)
                self.consecutive_env_errors = 0
                mdp.reset()
                self._join_new_agents(index)
            elif mdp.agents_join_mid_episode:
                self._join_new_agents(index)

    def _drop_episode(self, index: int, error: Exception) -> None:
        """An MDP raised mid-episode: count it, abandon its agents' episodes (their controllers drop
        the steps they recorded) and start a new episode."""
        self.env_errors += 1
        self.consecutive_env_errors += 1
        self.last_env_error = f"{type(error).__name__}: {error}"[:300]
        mdp = self.mdps[index]
        if self.env_errors <= LOGGED_ENV_ERRORS:
            log.warning("environment %d (%s) raised; episode dropped (%d so far)", index, type(mdp).__name__,
                        self.env_errors, exc_info=error)
        live = self._live[index]
        for slot in live.values():
            slot.coroutine.close()
        live.clear()
        mdp.pending_actions.clear()
        mdp.reset()
        self._join_new_agents(index)

    def check_environments(self, limit: int) -> None:
        """Raise EnvironmentFailingError once `limit` episodes in a row ended in an environment error."""
        if self.consecutive_env_errors >= limit:
            raise EnvironmentFailingError(
                f"the environment raised in {self.consecutive_env_errors} episodes in a row "
                f"(runtime.max_consecutive_env_errors={limit}); the last error: {self.last_env_error}")

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
