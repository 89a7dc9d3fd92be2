"""Experience recorded by training controllers, handed to the learner as one flat batch.

Steps are recorded per fragment: a run of consecutive steps of one agent. A fragment ends when
the agent's episode ends, or when the learner takes a batch while the episode goes on (a cut);
either way it keeps what the learner needs to bootstrap its value estimate: whether the last step
was terminal, and the observation that followed it. Agents of different lengths, agents that
join late and agents that leave early all fit this shape, so the learner never assumes a fixed
[T, num_envs] grid.

Fragments stay Python lists until the learner takes them, and are then converted together, once
per field, into flat arrays: converting each short episode on its own would cost more than
stepping it. Observations become float32, except uint8 ones (images, RAM bytes), which stay
bytes: a quarter of the size in every message and in the learner's memory; the networks cast
them right before their forward pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain

import numpy as np

from .agent import Decision
from .base import StepOutcome
from .gc_pause import gc_paused
from .recording import observation_array


@dataclass(frozen=True)
class ExperienceBatch:
    """Fragments laid end to end: per-step arrays are [T, ...], per-fragment arrays are [F, ...]."""

    observations: np.ndarray
    actions: np.ndarray
    log_probs: np.ndarray
    rewards: np.ndarray
    policy_versions: np.ndarray
    lengths: np.ndarray
    terminated: np.ndarray
    bootstrap_observations: np.ndarray

    def __len__(self) -> int:
        return len(self.rewards)

    @property
    def num_fragments(self) -> int:
        return len(self.lengths)

    def fragment(self, index: int) -> dict[str, np.ndarray]:
        """The steps of one fragment (for inspection and tests)."""
        start = int(self.lengths[:index].sum())
        stop = start + int(self.lengths[index])
        return {"observations": self.observations[start:stop], "actions": self.actions[start:stop],
                "log_probs": self.log_probs[start:stop], "rewards": self.rewards[start:stop],
                "policy_versions": self.policy_versions[start:stop]}


class Fragment:
    """A live fragment; its controller appends one step per tick."""

    __slots__ = ("observations", "actions", "log_probs", "rewards", "versions", "last_outcome")

    def __init__(self) -> None:
        self.clear()
        self.last_outcome: StepOutcome | None = None

    def clear(self) -> None:
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


class _Closed:
    """A fragment's lists frozen at its end, waiting for the next take."""

    __slots__ = ("observations", "actions", "log_probs", "rewards", "versions", "terminated", "bootstrap")

    def __init__(self, fragment: Fragment, terminated: bool) -> None:
        self.observations, self.actions = fragment.observations, fragment.actions
        self.log_probs, self.rewards, self.versions = fragment.log_probs, fragment.rewards, fragment.versions
        self.terminated = terminated
        assert fragment.last_outcome is not None
        self.bootstrap = fragment.last_outcome.observation


class ExperienceBuffer:
    """Collects the fragments of one policy's training controllers until the learner takes them."""

    def __init__(self) -> None:
        self._closed_steps = 0
        self._open: dict[Fragment, None] = {}  # insertion order keeps runs reproducible
        self._closed: list[_Closed] = []

    @property
    def num_steps(self) -> int:
        """Steps recorded since the last take (counted here, once per tick, not once per step)."""
        return self._closed_steps + sum(len(fragment.rewards) for fragment in self._open)

    def open(self) -> Fragment:
        fragment = Fragment()
        self._open[fragment] = None
        return fragment

    def finish(self, fragment: Fragment, terminated: bool) -> None:
        """The agent's episode ended; `terminated` False means it was truncated or left."""
        self._open.pop(fragment, None)
        if fragment.rewards:
            self._closed.append(_Closed(fragment, terminated))
            self._closed_steps += len(fragment.rewards)

    def discard(self, fragment: Fragment) -> None:
        """Forget an open fragment's steps since the last take: its episode cannot be trusted."""
        self._open.pop(fragment, None)
        fragment.clear()

    def take(self) -> ExperienceBatch:
        """Everything recorded so far; open fragments are cut and go on empty."""
        with gc_paused():  # cutting thousands of open fragments makes five lists each
            return self._take()

    def _take(self) -> ExperienceBatch:
        closed = self._closed
        for fragment in self._open:
            if fragment.rewards:
                closed.append(_Closed(fragment, terminated=False))
                fragment.clear()
        self._closed, self._closed_steps = [], 0
        if not closed:
            raise ValueError("no experience recorded yet")
        actions = np.asarray(list(chain.from_iterable(c.actions for c in closed)))
        return ExperienceBatch(
            observations=observation_array(list(chain.from_iterable(c.observations for c in closed))),
            actions=actions,
            log_probs=np.asarray(list(chain.from_iterable(c.log_probs for c in closed)), dtype=np.float32),
            rewards=np.asarray(list(chain.from_iterable(c.rewards for c in closed)), dtype=np.float32),
            policy_versions=np.asarray(list(chain.from_iterable(c.versions for c in closed)), dtype=np.int64),
            lengths=np.asarray([len(c.rewards) for c in closed], dtype=np.int64),
            terminated=np.asarray([c.terminated for c in closed], dtype=bool),
            bootstrap_observations=observation_array([c.bootstrap for c in closed]),
        )
