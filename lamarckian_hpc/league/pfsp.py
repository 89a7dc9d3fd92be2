"""Prioritized fictitious self-play (AlphaStar): pick opponents by a weighting of the win rate x
of the learner against each candidate.

- f_hard(x) = (1 - x)^p puts most weight on opponents the learner loses to (p = 2 in AlphaStar):
  the main agent keeps being confronted with whatever still beats it.
- f_var(x) = x (1 - x) puts most weight on opponents at about its own level: an exploiter that is
  still weak learns from games it can sometimes win instead of games it always loses.

When every weight is zero (the learner beats everyone with f_hard, or all results are certain
with f_var) the choice falls back to uniform, so a learner always has an opponent.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

Weighting = Literal["hard", "variance", "uniform"]


def f_hard(win_rates: np.ndarray, p: float = 2.0) -> np.ndarray:
    return (1.0 - np.asarray(win_rates, dtype=np.float64)) ** p


def f_var(win_rates: np.ndarray) -> np.ndarray:
    x = np.asarray(win_rates, dtype=np.float64)
    return x * (1.0 - x)


def pfsp_probabilities(win_rates: np.ndarray, weighting: Weighting = "hard", p: float = 2.0) -> np.ndarray:
    """Probabilities of choosing each candidate, given the learner's win rate against it."""
    x = np.asarray(win_rates, dtype=np.float64)
    if x.ndim != 1 or not len(x):
        raise ValueError(f"win_rates must be a non-empty 1-D array, got shape {x.shape}")
    if np.any((x < 0) | (x > 1)):
        raise ValueError(f"win rates must lie in [0, 1], got {x.tolist()}")
    if weighting == "hard":
        weights = f_hard(x, p)
    elif weighting == "variance":
        weights = f_var(x)
    elif weighting == "uniform":
        weights = np.ones_like(x)
    else:
        raise ValueError(f"unknown weighting {weighting!r}; allowed: hard, variance, uniform")
    total = weights.sum()
    return weights / total if total > 0 else np.full(len(x), 1.0 / len(x))
