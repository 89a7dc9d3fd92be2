"""Legal-action masks: a Discrete action space whose legal actions change from state to state
(board games), and the one place a mask is read from an observation.

The mask travels as the last `n` entries of the agent's own observation row (1 legal, 0 not),
so experience buffers, messages, run files, the centralised critic's widening and GAE carry it
unchanged, and the policy that samples and the loss that trains read it from the same row: the
distribution trained is the distribution sampled. An action space that is a `MaskedDiscrete`
says so; any other space means every action is always legal, at no cost.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from .sampler import PolicyOutput

#: The logit an illegal action gets: softmax gives it probability 0 (exp underflows), while
#: 0 * logit stays 0 in the entropy, which -inf would turn into NaN.
MASKED_LOGIT = -1e9


class MaskedDiscrete(gym.spaces.Discrete):
    """Discrete(n) whose legal actions are the last n entries of each own observation row."""

    #: Read by models/ without importing this module (models import only config).
    legal_actions_in_observation = True


def mask_size(action_space: Any) -> int:
    """Entries of the legal-action mask at the end of an own observation row (0: no mask)."""
    return int(action_space.n) if getattr(action_space, "legal_actions_in_observation", False) else 0


def legal_actions(own_rows: np.ndarray, size: int) -> np.ndarray:
    """[batch, size] booleans from the last `size` columns of flattened own rows; a row with no
    legal action at all (an agent asked to act after its game ended) counts every action legal,
    so that sampling stays defined."""
    legal = own_rows[:, -size:] > 0.5
    return legal | ~legal.any(axis=1, keepdims=True)


class RandomLegalPolicy:
    """The sampler's `Policy` protocol for a uniformly random player: each row's action is drawn
    among the legal ones of its mask (any action without one); the yardstick a board-game
    learner is measured against."""

    def __init__(self, action_space: gym.spaces.Discrete, seed: int) -> None:
        self.num_actions = int(action_space.n)
        self.mask_size = mask_size(action_space)
        self.rng = np.random.default_rng(seed)

    def __call__(self, observations: np.ndarray) -> PolicyOutput:
        rows = observations.reshape(len(observations), -1)
        legal = legal_actions(rows, self.mask_size) if self.mask_size else \
            np.ones((len(rows), self.num_actions), dtype=bool)
        # a uniform key per action, illegal ones pushed below every legal one: argmax is uniform over legal
        keys = self.rng.random(legal.shape) + legal
        counts = legal.sum(axis=1)
        return PolicyOutput(keys.argmax(axis=1), -np.log(counts).astype(np.float32))
