"""The recent-episodes window that both trainers report and stop on."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

import numpy as np

from ...config import StopConfig


class RecentEpisodes:
    def __init__(self, window: int) -> None:
        self.window = window
        self.returns: deque[float] = deque(maxlen=window)
        self.lengths: deque[int] = deque(maxlen=window)
        self.count = 0

    def add(self, returns: Iterable[float], lengths: Iterable[int]) -> None:
        for episode_return, length in zip(returns, lengths):
            self.returns.append(float(episode_return))
            self.lengths.append(int(length))
            self.count += 1

    @property
    def mean_return(self) -> float | None:
        return float(np.mean(self.returns)) if self.returns else None

    def reached(self, target: float | None) -> bool:
        """A full window whose mean return is at least `target`."""
        return target is not None and len(self.returns) == self.window and self.mean_return >= target

    def should_stop(self, stop: StopConfig, wall_seconds: float) -> bool:
        """The target return was reached, or the wall-time budget is spent."""
        out_of_time = stop.max_wall_seconds is not None and wall_seconds >= stop.max_wall_seconds
        return out_of_time or self.reached(stop.target_return)

    def metrics(self) -> dict[str, float]:
        if not self.returns:
            return {"episodes": float(self.count)}
        return {"episodes": float(self.count), "episode_return_mean": float(np.mean(self.returns)),
                "episode_length_mean": float(np.mean(self.lengths))}
