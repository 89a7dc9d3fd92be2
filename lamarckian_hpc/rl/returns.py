"""Return and advantage estimators as plain functions of arrays.

Steps of many agents are laid end to end in one flat sequence; `segment_ends[t]` marks the last
step of each agent's fragment, so nothing flows from one fragment into the next. Bootstrapping is
folded into `next_values`: the value of the following state, 0 after a terminal step, the
critic's estimate after a truncation or a cut.
"""

from __future__ import annotations

import numpy as np


def generalized_advantages(
    rewards: np.ndarray,
    values: np.ndarray,
    next_values: np.ndarray,
    segment_ends: np.ndarray,
    gamma: float,
    gae_lambda: float,
) -> np.ndarray:
    """GAE (Schulman et al. 2016) over a flat sequence of fragments; all inputs are [T].

    delta_t = r_t + gamma * next_value_t - value_t
    A_t     = delta_t + gamma * lambda * (1 - segment_end_t) * A_{t+1}
    """
    deltas = rewards + gamma * next_values - values
    carry = gamma * gae_lambda * (1.0 - segment_ends.astype(np.float64))
    advantages = np.empty(len(rewards), dtype=np.float64)
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = deltas[t] + carry[t] * running
        advantages[t] = running
    return advantages.astype(np.float32)


def next_values_of_fragments(
    values: np.ndarray, lengths: np.ndarray, bootstrap_values: np.ndarray, terminated: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Shift `values` [T] by one step inside each fragment and close each fragment with its bootstrap.

    lengths, bootstrap_values and terminated are [num_fragments]. Returns (next_values, segment_ends), both [T].
    """
    next_values = np.empty_like(values)
    next_values[:-1] = values[1:]
    ends = np.cumsum(lengths) - 1
    next_values[ends] = np.where(terminated, 0.0, bootstrap_values)
    segment_ends = np.zeros(len(values), dtype=bool)
    segment_ends[ends] = True
    return next_values, segment_ends
