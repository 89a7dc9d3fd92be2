"""CPU utilization of a run's whole process tree, as a fraction of the cores it was given."""

from __future__ import annotations

import time

import psutil


class TreeCpuMeter:
    """CPU seconds of this process and all its descendants (Ray's workers included) per wall second
    and core, between successive calls of `sample`."""

    def __init__(self, num_cores: int) -> None:
        self.num_cores = max(1, num_cores)
        self.root = psutil.Process()
        self._seen: dict[int, float] = {}
        self._last_wall = time.monotonic()
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
        gained = self._cpu_seconds()
        elapsed, self._last_wall = now - self._last_wall, now
        return gained / max(elapsed, 1e-9) / self.num_cores
