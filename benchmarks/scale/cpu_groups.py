"""Cores of its own for every emulated host, and for the learner: cgroup v1 cpu groups with a CFS
quota, for the benchmarks that emulate hosts on one machine (root needed).

`sampling_hosts.py` names a host's group to that host's Ray node in `LAMARCKIAN_HPC_CPU_CGROUP`
(the raylet and its workers inherit it; an actor joins it first thing, as on the test cluster,
`lamarckian_hpc/runtime/placement/cpu_quota.py`) and the learner's in `LAMARCKIAN_HPC_LEARNER_CPU_CGROUP`.
Only what joins a group is held by it: Ray's daemons and the relays run on the machine's other
cores. The groups are removed on exit, also after an error; what is still in one is moved back
to the root group first. `cpu.stat` (periods, throttled periods and time) is read per group, so
a run can tell whether a quota (the learner's above all) was the ceiling.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

ROOT = Path("/sys/fs/cgroup/cpu")
#: The CFS period of every group: the test cluster's (TESTCLUSTER_CPU_PERIOD_US) where it names one, so
#: that groups made here throttle as its nodes' groups do; the kernel's default 100 ms otherwise.
PERIOD_US = int(os.environ.get("TESTCLUSTER_CPU_PERIOD_US") or 100_000)
#: cpu.shares of every group (TESTCLUSTER_CPU_SHARES), or the kernel's default when unset.
SHARES = os.environ.get("TESTCLUSTER_CPU_SHARES") or None
PREFIX = "lhs-"


class CpuGroup:
    """One group: `path` is what LAMARCKIAN_HPC_CPU_CGROUP (or ..._LEARNER_...) names."""

    def __init__(self, name: str, cpus: float, root: Path = ROOT) -> None:
        self.name, self.cpus, self.path = name, cpus, root / f"{PREFIX}{name}"

    def create(self) -> None:
        self.remove()  # leftover of an interrupted run
        self.path.mkdir()
        (self.path / "cpu.cfs_period_us").write_text(f"{PERIOD_US}\n")
        (self.path / "cpu.cfs_quota_us").write_text(f"{max(int(self.cpus * PERIOD_US), 1000)}\n")
        if SHARES:
            (self.path / "cpu.shares").write_text(f"{SHARES}\n")

    def stat(self) -> dict[str, int]:
        """nr_periods, nr_throttled, throttled_time (ns) so far."""
        lines = (self.path / "cpu.stat").read_text().split("\n")
        return {key: int(value) for key, value in (line.split() for line in lines if line)}

    def remove(self) -> None:
        if not self.path.exists():
            return
        for pid in (self.path / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):  # gone meanwhile
                (self.path.parent / "cgroup.procs").write_text(f"{pid}\n")
        with contextlib.suppress(OSError):
            os.rmdir(self.path)


def throttling(before: dict[str, int], after: dict[str, int]) -> dict[str, float]:
    """What a group's quota did between two `stat()`s: the share of its CFS periods in which it was
    throttled (near 1: the quota was the ceiling) and the throttled seconds."""
    periods = after["nr_periods"] - before["nr_periods"]
    return {"periods": periods,
            "throttled_share": (after["nr_throttled"] - before["nr_throttled"]) / periods if periods else 0.0,
            "throttled_seconds": (after["throttled_time"] - before["throttled_time"]) / 1e9}


class QuotaMeter:
    """Every group's `cpu.stat` once a second while a run goes on, so that the throttling of a
    window of it (its steady state, not its start-up) can be read afterwards."""

    def __init__(self, groups: dict[str, list[CpuGroup]], interval_s: float = 1.0) -> None:
        self.groups, self.interval_s = groups, interval_s
        self.times: list[float] = []
        self.stats: list[dict[str, list[dict[str, int]]]] = []
        self.process: psutil.Process | None = None  # the learner's, once `watch` names it
        self.cpu_seconds: list[float] = []
        self.stop = threading.Event()
        self._sample()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def watch(self, pid: int) -> None:
        """Also read the CPU seconds of process `pid` (the learner: its threads, not its children)."""
        self.process = psutil.Process(pid)

    def _sample(self) -> None:
        stats = {kind: [group.stat() for group in chosen] for kind, chosen in self.groups.items()}
        try:
            times = self.process.cpu_times() if self.process else None
            cpu = times.user + times.system if times else 0.0
        except psutil.Error:  # ended: its last reading stands
            cpu = self.cpu_seconds[-1] if self.cpu_seconds else 0.0
        self.times.append(time.monotonic())
        self.stats.append(stats)
        self.cpu_seconds.append(cpu)

    def _run(self) -> None:
        while not self.stop.wait(self.interval_s):
            self._sample()

    def finish(self) -> None:
        self.stop.set()
        self.thread.join()
        self._sample()

    def window(self, start: float, end: float) -> dict[str, Any]:
        """Throttling per group between the samples nearest to monotonic times `start` and `end`, and
        the watched process's CPU seconds and seconds of that span."""
        first = min(bisect.bisect_left(self.times, start), len(self.times) - 1)
        last = max(min(bisect.bisect_right(self.times, end) - 1, len(self.times) - 1), first)
        found: dict[str, Any] = {kind: [throttling(old, new) for old, new in
                                        zip(self.stats[first][kind], self.stats[last][kind])] for kind in self.groups}
        found["process_cpu_seconds"] = self.cpu_seconds[last] - self.cpu_seconds[first]
        found["span_seconds"] = self.times[last] - self.times[first]
        return found


@contextlib.contextmanager
def cpu_groups(hosts: int, host_cpus: float | None, learner_cpus: float | None,
               root: Path = ROOT) -> Iterator[tuple[list[CpuGroup], CpuGroup | None]]:
    """(one group per host, or none; the learner's group, or None), removed on exit."""
    groups = [CpuGroup(f"host{i}", host_cpus, root) for i in range(hosts)] if host_cpus else []
    learner = CpuGroup("learner", learner_cpus, root) if learner_cpus else None
    everything = groups + ([learner] if learner else [])
    if everything and not root.is_dir():
        raise SystemExit(f"--host-cpus/--learner-cpus need cgroup v1's cpu controller at {root}")
    try:
        for group in everything:
            group.create()
        yield groups, learner
    finally:
        for group in everything:
            group.remove()
