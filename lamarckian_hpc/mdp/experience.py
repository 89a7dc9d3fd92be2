"""Experience recorded by training controllers, cut into fragments the learner can use.

A fragment is a run of consecutive steps of one agent under one policy. It ends when the agent's
episode ends, or when the learner takes a batch while the episode goes on (a cut); either way
it keeps what the learner needs to bootstrap its value estimate: whether the last step was
terminal, and the observation that followed it. Agents of different lengths, agents that join
late and agents that leave early all fit this shape, so the learner never assumes a fixed
[T, num_envs] grid.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .agent import Decision
from .base import StepOutcome


@dataclass(frozen=True)
class FragmentArrays:
    """A finished or cut fragment as arrays: [T, ...] per step, plus how it ends."""

    policy_id: str
    observations: np.ndarray
    actions: np.ndarray
    log_probs: np.ndarray
    rewards: np.ndarray
    policy_versions: np.ndarray
    terminated: bool
    bootstrap_observation: np.ndarray

    def __len__(self) -> int:
        return len(self.rewards)


class Fragment:
    """A live fragment; the controller appends one step per tick."""

    __slots__ = ("policy_id", "buffer", "observations", "actions", "log_probs", "rewards", "versions", "last_outcome")

    def __init__(self, policy_id: str, buffer: ExperienceBuffer) -> None:
        self.policy_id = policy_id
        self.buffer = buffer
        self._clear()
        self.last_outcome: StepOutcome | None = None

    def _clear(self) -> None:
        self.observations: list[np.ndarray] = []
        self.actions: list = []
        self.log_probs: list[float] = []
        self.rewards: list[float] = []
        self.versions: list[int] = []

    def append(self, observation: np.ndarray, decision: Decision, outcome: StepOutcome) -> None:
        self.observations.append(observation)
        self.actions.append(decision.action)
        self.log_probs.append(decision.log_prob)
        self.rewards.append(outcome.reward)
        self.versions.append(decision.policy_version)
        self.last_outcome = outcome
        self.buffer.num_steps += 1

    def to_arrays(self, terminated: bool) -> FragmentArrays:
        assert self.last_outcome is not None
        return FragmentArrays(
            policy_id=self.policy_id,
            observations=np.asarray(self.observations, dtype=np.float32),
            actions=np.asarray(self.actions),
            log_probs=np.asarray(self.log_probs, dtype=np.float32),
            rewards=np.asarray(self.rewards, dtype=np.float32),
            policy_versions=np.asarray(self.versions, dtype=np.int64),
            terminated=terminated,
            bootstrap_observation=np.asarray(self.last_outcome.observation, dtype=np.float32),
        )


class ExperienceBuffer:
    """Collects the fragments of every training controller until the learner takes them."""

    def __init__(self) -> None:
        self.num_steps = 0
        self._open: dict[Fragment, None] = {}  # insertion order keeps runs reproducible
        self._finished: list[FragmentArrays] = []

    def open(self, policy_id: str) -> Fragment:
        fragment = Fragment(policy_id, self)
        self._open[fragment] = None
        return fragment

    def finish(self, fragment: Fragment, terminated: bool) -> None:
        """The agent's episode ended; `terminated` False means it was truncated or left."""
        self._open.pop(fragment, None)
        if fragment.rewards:
            self._finished.append(fragment.to_arrays(terminated))

    def take(self) -> list[FragmentArrays]:
        """Everything recorded so far; open fragments are cut and go on empty."""
        taken = self._finished
        for fragment in self._open:
            if fragment.rewards:
                taken.append(fragment.to_arrays(terminated=False))
                fragment._clear()
        self._finished = []
        self.num_steps = 0
        return taken
