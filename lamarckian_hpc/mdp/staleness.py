"""How stale experience is: how many policy versions the learner is ahead of the policy that
sampled each step, as the metrics every learner reports (a mean, a max and a histogram). Plain
numpy, so that the table of algorithms can name these metrics without importing torch."""

from __future__ import annotations

import numpy as np

STALENESS_BINS = 8  # staleness_count_0 .. staleness_count_7, then staleness_count_8plus
STALENESS_METRICS: tuple[str, ...] = tuple(f"staleness_count_{k}" for k in range(STALENESS_BINS)) + (
    f"staleness_count_{STALENESS_BINS}plus",
)


def staleness_metrics(staleness: np.ndarray) -> dict[str, float]:
    """Mean, max and a histogram (one metric per bin) of per-step staleness."""
    counts = np.bincount(np.minimum(staleness, STALENESS_BINS), minlength=STALENESS_BINS + 1)
    metrics = {"staleness_mean": float(staleness.mean()), "staleness_max": float(staleness.max())}
    metrics.update({name: float(count) for name, count in zip(STALENESS_METRICS, counts)})
    return metrics
