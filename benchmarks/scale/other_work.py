"""Other work on a shared machine: the CPU that processes outside a benchmark's own process tree
take while it runs, so that a point that other work slowed down can be told from a clean one and
made again (`sampling_hosts.py`'s `--quiet-cores`)."""

from __future__ import annotations

import os
import threading
import time

from benchmarks.scale.sampling import machine_busy_seconds


class OtherWork:
    """CPU seconds that processes outside this benchmark's own tree (its Ray nodes, the training
    run, the actors, the relays) use while it runs: on a shared machine, what tells a point that
    other work slowed down from a clean one."""

    def __init__(self) -> None:
        from lamarckian_hpc.runtime.placement.process_stats import TreeCpuMeter

        self.meter = TreeCpuMeter(1)
        self.own = 0.0
        self.start_busy, self.start_total = machine_busy_seconds()
        self.started = self.last = time.monotonic()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        now = time.monotonic()
        self.own += self.meter.sample() * (now - self.last)  # sample(): own CPU seconds per second
        self.last = now

    def _run(self) -> None:
        while not self.stop.wait(1.0):  # often enough to see processes that live a few seconds
            self._sample()

    def finish(self) -> dict[str, float]:
        self.stop.set()
        self.thread.join()
        self._sample()
        busy, total = machine_busy_seconds()
        wall = max(self.last - self.started, 1e-9)
        return {"machine_cpu_busy": (busy - self.start_busy) / max(total - self.start_total, 1e-9),
                "own_cores": self.own / wall, "other_cores": max(busy - self.start_busy - self.own, 0.0) / wall,
                "load_average_at_end": list(os.getloadavg())}
