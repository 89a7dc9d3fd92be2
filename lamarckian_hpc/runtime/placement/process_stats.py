"""CPU utilization of a run's whole process tree, as a fraction of the cores it was given."""

from __future__ import annotations

import time

import psutil

#: The shortest span a utilization is measured over. Finding the process tree reads every process's
#: /proc entry on the machine: done at every update, that is a visible share of a fast learner's time.
MIN_INTERVAL_SECONDS = 2.0


class TreeCpuMeter:
    """CPU seconds of this process and all its descendants (Ray's workers included) per wall second
    and core, over the span since the previous measurement; `sample` measures anew only once that
    span is at least `min_interval_seconds`, and otherwise gives the previous figure."""

    def __init__(self, num_cores: int, min_interval_seconds: float = MIN_INTERVAL_SECONDS) -> None:
        self.num_cores = max(1, num_cores)
        self.min_interval_seconds = min_interval_seconds
        self.root = psutil.Process()
        self._seen: dict[int, float] = {}
        self._last_wall = time.monotonic()
        self._last: float | None = None
        self._cpu_seconds()

    def _cpu_seconds(self) -> float:
        """CPU seconds gained since the previous call by every process alive now; a process not
        seen before counts with all its CPU time (it started during the interval)."""
        gained = 0.0
        seen: dict[int, float] = {}
        for process in [self.root, *self._children()]:
            try:
                times = process.cpu_times()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            seen[process.pid] = times.user + times.system
            gained += seen[process.pid] - self._seen.get(process.pid, 0.0)
        self._seen = seen
        return max(0.0, gained)

    def _children(self) -> list[psutil.Process]:
        try:
            return self.root.children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def sample(self) -> float:
        now = time.monotonic()
        if self._last is not None and now - self._last_wall < self.min_interval_seconds:
            return self._last
        gained = self._cpu_seconds()
        elapsed, self._last_wall = now - self._last_wall, now
        self._last = gained / max(elapsed, 1e-9) / self.num_cores
        return self._last
