"""A uniform replay buffer of transitions, as numpy ring arrays (no per-transition objects)."""

from __future__ import annotations

import numpy as np

from ..mdp import ExperienceBatch


def transitions_of(experience: ExperienceBatch, action_dtype: type = np.int64) -> dict[str, np.ndarray]:
    """(observation, action, reward, next observation, done) for every step of a batch.

    Inside a fragment the next observation is the following step's; at a fragment's end it is the
    bootstrap observation, and `done` is set only when the fragment ended in a terminal state.
    Actions are made `action_dtype`: int64 indices for DQN, float32 for continuous actions (SAC).
    """
    ends = np.cumsum(experience.lengths) - 1
    next_observations = np.empty_like(experience.observations)
    next_observations[:-1] = experience.observations[1:]
    next_observations[ends] = experience.bootstrap_observations
    dones = np.zeros(len(experience), dtype=np.float32)
    dones[ends] = experience.terminated
    return {"observations": experience.observations, "actions": experience.actions.astype(action_dtype, copy=False),
            "rewards": experience.rewards, "next_observations": next_observations, "dones": dones}


class ReplayBuffer:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.arrays: dict[str, np.ndarray] = {}
        self.size = 0
        self._next = 0

    def add(self, transitions: dict[str, np.ndarray]) -> None:
        count = len(transitions["rewards"])
        if not self.arrays:
            self.arrays = {name: np.zeros((self.capacity, *array.shape[1:]), array.dtype)
                           for name, array in transitions.items()}
        positions = (self._next + np.arange(count)) % self.capacity
        for name, array in transitions.items():
            self.arrays[name][positions] = array
        self._next = int((self._next + count) % self.capacity)
        self.size = min(self.capacity, self.size + count)

    def sample(self, count: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        index = rng.integers(0, self.size, size=count)
        return {name: array[index] for name, array in self.arrays.items()}
