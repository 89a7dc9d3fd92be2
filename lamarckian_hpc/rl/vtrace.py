"""V-trace off-policy targets (Espeholt et al. 2018, IMPALA) over a flat sequence of fragments.

All inputs are [T]; `segment_ends[t]` marks the last step of a fragment, and `next_values[t]` is
the value of the state after step t under the current critic (0 after a terminal step, the
bootstrap estimate after a cut), exactly as for GAE in `returns.py`.
"""

from __future__ import annotations

import numpy as np

from .returns import reverse_fragment_scan


def vtrace(
    behaviour_log_probs: np.ndarray,
    target_log_probs: np.ndarray,
    rewards: np.ndarray,
    values: np.ndarray,
    next_values: np.ndarray,
    segment_ends: np.ndarray,
    gamma: float,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Returns (vs, policy-gradient advantages), both [T].

    rho_t = min(rho_bar, pi/mu), c_t = min(c_bar, pi/mu)
    vs_t  = V_t + delta_t + gamma * c_t * (vs_{t+1} - V_{t+1}),  delta_t = rho_t (r_t + gamma V_{t+1} - V_t)
    A_t   = rho_t (r_t + gamma vs_{t+1} - V_t)
    where inside a fragment V_{t+1} and vs_{t+1} are the next step's, and at its end both are next_values[t].
    """
    ratios = np.exp(target_log_probs.astype(np.float64) - behaviour_log_probs)
    rhos, cs = np.minimum(rho_bar, ratios), np.minimum(c_bar, ratios)
    deltas = rhos * (rewards + gamma * next_values - values)
    corrections = reverse_fragment_scan(deltas, gamma * cs, segment_ends)  # vs_t - V_t
    vs = values + corrections
    # The step after t is t+1 inside a fragment; after the last step of the sequence (marked or not)
    # it is the bootstrap, never the first step of the sequence.
    next_vs = np.where(segment_ends, next_values, np.append(vs[1:], next_values[-1:]))
    advantages = rhos * (rewards + gamma * next_vs - values)
    return vs.astype(np.float32), advantages.astype(np.float32)
