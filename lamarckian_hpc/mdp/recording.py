"""Recording whole episodes for the run file, beside the experience the learner trains on.

Experience is cut into fragments whenever the learner takes a batch, so an episode cannot be read
back from it; a recorded episode keeps its own list of every step from the first to the last. Only
the episodes an `EpisodeSelector` picks are recorded, so an unrecorded episode costs one counter
increment when it starts and one `is None` test per step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


class EpisodeSelector:
    """Picks the episodes a sampler records: one in every `every` that start, from the first; none
    when `every` is 0."""

    __slots__ = ("every", "started")

    def __init__(self, every: int) -> None:
        if every < 0:
            raise ValueError(f"record one episode in every {every}: need 0 (none) or more")
        self.every = every
        self.started = 0

    def start(self) -> EpisodeTape | None:
        """A tape for the episode that starts now, or None when it is not recorded."""
        picked = self.every > 0 and self.started % self.every == 0
        self.started += 1
        return EpisodeTape() if picked else None


def observation_array(rows: list) -> np.ndarray:
    """Observations as one array: uint8 stays uint8 (images, RAM bytes), anything else float32."""
    dtype = np.uint8 if getattr(rows[0], "dtype", None) == np.uint8 else np.float32
    return np.asarray(rows, dtype=dtype)


def action_array(actions: list) -> np.ndarray:
    """Actions as one array: integers (discrete) as int64, anything else float32."""
    array = np.asarray(actions)
    return array.astype(np.int64 if array.dtype.kind in "biu" else np.float32, copy=False)


@dataclass(frozen=True)
class RecordedSteps:
    """Every step of one recorded episode of one agent, as arrays."""

    agent_id: str
    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    policy_versions: np.ndarray
    terminated: bool  # the last step ended the episode; False: truncated, or the agent left

    def __len__(self) -> int:
        return len(self.rewards)

    @property
    def nbytes(self) -> int:
        return sum(array.nbytes for array in (self.observations, self.actions, self.rewards, self.policy_versions))

    def to_plain(self) -> dict[str, Any]:
        """Its fields as plain data (a string, a boolean, numpy arrays): what a population worker's
        answer carries to the process that writes the run file, over a pipe or through Ray."""
        return {name: getattr(self, name) for name in RECORDED_FIELDS}

    @classmethod
    def from_plain(cls, fields: dict[str, Any]) -> RecordedSteps:
        return cls(str(fields["agent_id"]), np.asarray(fields["observations"]), np.asarray(fields["actions"]),
                   np.asarray(fields["rewards"], dtype=np.float32),
                   np.asarray(fields["policy_versions"], dtype=np.int64), bool(fields["terminated"]))


RECORDED_FIELDS = ("agent_id", "observations", "actions", "rewards", "policy_versions", "terminated")


class EpisodeTape:
    """The steps of one recorded episode, appended by its training controller."""

    __slots__ = ("observations", "actions", "rewards", "versions")

    def __init__(self) -> None:
        self.observations: list[Any] = []
        self.actions: list[Any] = []
        self.rewards: list[float] = []
        self.versions: list[int] = []

    def append(self, observation: Any, action: Any, reward: float, policy_version: int) -> None:
        self.observations.append(observation)
        self.actions.append(action)
        self.rewards.append(reward)
        self.versions.append(policy_version)

    def finish(self, agent_id: Any, terminated: bool) -> RecordedSteps:
        return RecordedSteps(str(agent_id), observation_array(self.observations), action_array(self.actions),
                             np.asarray(self.rewards, dtype=np.float32), np.asarray(self.versions, dtype=np.int64),
                             bool(terminated))
