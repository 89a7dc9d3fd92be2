"""The measurement parts of the side-by-side comparisons with a peer library (`vs_rllib.py` and
the others like it): one side per child process, timed from that process's start.

- `pin_threads()`: one BLAS/OpenMP thread in this process and every child, set before numpy or
  torch is imported (Ray sets it in its workers but not in the driver, where a learner runs).
- `PeakMemory`: the largest sums of PSS and of RSS over a process tree, sampled in a thread. PSS
  splits each page shared between processes (torch's libraries, Ray's) among them, so its sum is
  what the tree costs the machine; the RSS sum counts a shared page once per process.
- `Progress`: what a side reports after each update (env steps sampled and trained, the recent
  return, any other figure such as a score rate), and the CPU seconds of the side's process tree
  over the steady window from the end of the first update to the end of the last, per wall second
  and core (`cpu_utilization`); the machine's busy fraction over the same window beside it tells
  whether other work shared the cores. With `curve=True` it keeps every update as a point.
- `run_child()`: run a command in a process group of its own and return the JSON line it prints,
  killing the whole group when it outlives its budget.
- `median_of()`, `ratios()`, `cell()`, `target_cell()`, `score_at()`, `check_target()`: medians
  over repeats, ours/peer ratios, table cells, a curve read at marks, the verdict on a target.

A child prints one JSON line (`{"side": ..., ...}`); nothing is pickled between the processes.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time

SINGLE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
#: Ray's object store on either side: the sides pass little through it, and the machine is small.
OBJECT_STORE_BYTES = 100 * 1024 * 1024
#: Seconds a child may run past its side's wall budget (imports, Ray start-up and shut-down).
CHILD_START_SLACK_SECONDS = 300


def process_seconds() -> float:
    """Wall seconds since this process started. psutil's `create_time` adds the start's clock ticks
    to the boot time, which Linux gives in whole seconds, so it runs up to a second early (0.82 s
    on the machine this was written on, which every side's time from process start carried); the
    start is placed against `/proc/uptime` instead, which has 10 ms steps. Elsewhere, psutil's."""
    try:
        with open("/proc/self/stat") as stat, open("/proc/uptime") as uptime:
            start_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
            up = float(uptime.read().split()[0])
        return max(0.0, up - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        import psutil

        return time.time() - psutil.Process().create_time()


def pin_threads() -> None:
    """One thread per BLAS/OpenMP pool here and in every child; call before importing numpy."""
    os.environ.update(SINGLE_THREAD)


def machine_busy_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, every process included."""
    import psutil

    times = psutil.cpu_times()
    total = sum(times)
    return total - times.idle - getattr(times, "iowait", 0.0), total


class PeakMemory:
    """A thread that samples the sums of PSS and of RSS over this process and its descendants, and
    at the peak, the PSS of each kind of process (`peak_breakdown`: what to take memory back from)."""

    def __init__(self, interval_seconds: float = 0.25) -> None:
        import psutil

        self.psutil = psutil
        self.interval_seconds = interval_seconds
        self.root = psutil.Process()
        self.peak_bytes = 0  # PSS
        self.peak_rss_bytes = 0
        self.peak_breakdown: dict[str, int] = {}
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name="peak-memory", daemon=True)
        self.thread.start()

    @staticmethod
    def _kind(process) -> str:
        """The process's name; for a Python process, the script or module it runs (Ray's agents)."""
        name = process.name()
        if not name.startswith("python"):
            return name
        script = next((part for part in process.cmdline()[1:] if not part.startswith("-")), "")
        return script.rsplit("/", 2)[-2] + "/" + script.rsplit("/", 1)[-1] if "/" in script else script or name

    def _run(self) -> None:
        while not self.stop_event.wait(self.interval_seconds):
            pss = rss = 0
            kinds: dict[str, int] = {}
            for process in [self.root, *self.root.children(recursive=True)]:
                try:
                    memory = process.memory_full_info()
                    kind = "this process" if process == self.root else self._kind(process)
                except (self.psutil.NoSuchProcess, self.psutil.AccessDenied):
                    continue
                pss, rss = pss + memory.pss, rss + memory.rss
                kinds[kind] = kinds.get(kind, 0) + memory.pss
            if pss > self.peak_bytes:
                self.peak_bytes, self.peak_breakdown = pss, kinds
            self.peak_rss_bytes = max(self.peak_rss_bytes, rss)

    def stop(self) -> tuple[int, int]:
        """(peak PSS, peak RSS) sums, in bytes."""
        self.stop_event.set()
        self.thread.join()
        return self.peak_bytes, self.peak_rss_bytes


class Progress:
    """What one side reports after each update, timed from the start of its process."""

    def __init__(self, target_return: float | None, max_seconds: float, curve: bool = False) -> None:
        from lamarckian_hpc.runtime.placement.process_stats import TreeCpuMeter

        self.meter_type = TreeCpuMeter
        self.num_cores = os.cpu_count() or 1
        self.process_start = time.time() - process_seconds()
        self.target_return, self.max_seconds = target_return, max_seconds
        self.run_meter = TreeCpuMeter(self.num_cores)
        self.window_meter = None
        self.machine_start = (0.0, 0.0)
        self.first: tuple[float, float, float] | None = None
        self.last: tuple[float, float, float] = (0.0, 0.0, 0.0)
        self.previous_seconds = 0.0  # when the update before the last ended
        self.updates = 0
        self.return_mean: float | None = None
        self.target_seconds: float | None = None
        self.target_frames: float | None = None
        self.figures: dict[str, float] = {}
        self.latest: dict[str, float | None] = {}  # the other figures of the last update
        self.points: list[dict] | None = [] if curve else None

    def seconds(self) -> float:
        return time.time() - self.process_start

    @property
    def out_of_time(self) -> bool:
        return self.seconds() > self.max_seconds

    def next_update_late(self) -> bool:
        """True when one more update as long as the last one would end past the budget."""
        if self.updates < 2:
            return self.out_of_time
        return self.seconds() + self.last[0] - self.previous_seconds > self.max_seconds

    @property
    def reached(self) -> bool:
        return self.target_seconds is not None

    def update(self, sampled: float, trained: float, return_mean: float | None, **figures: float | None) -> None:
        now = self.seconds()
        if self.first is None:
            self.first = (now, sampled, trained)
            self.window_meter = self.meter_type(self.num_cores)
            self.machine_start = machine_busy_seconds()
        self.previous_seconds, self.last = self.last[0], (now, sampled, trained)
        self.updates += 1
        self.return_mean = return_mean
        self.latest = dict(figures)
        if self.points is not None:
            self.points.append({"seconds": now, "env_steps_sampled": sampled, "env_steps_trained": trained,
                                "return_mean": return_mean, **figures})
        if (self.target_return is not None and self.target_seconds is None and return_mean is not None
                and return_mean >= self.target_return):
            self.target_seconds, self.target_frames = now, sampled

    def finish(self) -> None:
        """Read the CPU meters; call right after the last update, before anything shuts down."""
        self.figures["run_cpu_utilization"] = self.run_meter.sample()
        if self.window_meter is not None and self.updates > 1:
            self.figures["cpu_utilization"] = self.window_meter.sample()
            busy, total = machine_busy_seconds()
            self.figures["machine_cpu_utilization"] = (busy - self.machine_start[0]) / max(
                total - self.machine_start[1], 1e-9)

    def summary(self) -> dict:
        if self.first is None:
            return {"updates": 0, "error": "no update within the budget", "seconds": self.seconds()}
        (first_seconds, first_sampled, first_trained), (last_seconds, sampled, trained) = self.first, self.last
        window = last_seconds - first_seconds
        steady = self.updates > 1 and window > 0
        summary = {
            "updates": self.updates, "env_steps_sampled": sampled, "env_steps_trained": trained,
            "seconds": last_seconds, "first_update_seconds": first_seconds,
            "sampled_steps_per_second": (sampled - first_sampled) / window if steady else None,
            "trained_steps_per_second": (trained - first_trained) / window if steady else None,
            "run_sampled_steps_per_second": sampled / last_seconds,
            "run_trained_steps_per_second": trained / last_seconds,
            "cpu_utilization": None, "machine_cpu_utilization": None, **self.figures,
            "return_mean": self.return_mean, "target_return": self.target_return,
            "target_seconds": self.target_seconds, "target_frames": self.target_frames, **self.latest,
        }
        if self.points is not None:
            summary["curve"] = self.points
        return summary


def run_child(command: list[str], side: str, max_seconds: float, label: str = "") -> dict:
    """Run one side in a process group of its own, so that a run past its time ends with its Ray
    and workers; its record is the last JSON line it printed whose `side` is `side`."""
    started = time.monotonic()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, **SINGLE_THREAD}, start_new_session=True)
    try:
        stdout, stderr = child.communicate(timeout=max_seconds + CHILD_START_SLACK_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        return {"side": side, "error": "timed out"}
    finally:
        try:  # whatever the side left behind in its group (a Ray worker that outlived its raylet)
            os.killpg(child.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            record = json.loads(line)
            if record.get("side") == side:
                return {**record, "process_seconds": time.monotonic() - started}
    tail = "\n".join((stdout + stderr).splitlines()[-30:])
    print(f"{side} {label} failed (exit {child.returncode}):\n{tail}", file=sys.stderr)
    return {"side": side, "error": f"exit {child.returncode}", "log_tail": tail}


def median_of(records: list[dict], key: str) -> float | None:
    """Median over the runs; None when a run has no figure (for a target: did not reach it)."""
    values = [record.get(key) for record in records]
    return None if not values or None in values else statistics.median(values)


def ratios(ours: dict, peer: dict, keys: tuple[str, ...]) -> dict:
    """ours / peer per figure; None where either lacks it or the peer's is 0."""
    return {key: ours[key] / peer[key] if ours.get(key) is not None and peer.get(key) else None for key in keys}


def cell(value: float | None, form: str) -> str:
    return "–" if value is None else format(value, form)


THROUGHPUT = ("sampled_steps_per_second", "trained_steps_per_second")


def share_of_bound(figures: dict, bound: float | None) -> dict:
    """A side's env steps/s sampled and trained as fractions of the raw bound (None without one)."""
    return {key: figures[key] / bound if figures[key] is not None and bound else None for key in THROUGHPUT}


def table_sides(summary: dict, peer: str) -> tuple[tuple[str, dict, bool], ...]:
    """The three rows of a comparison: (label, figures, is_ratio) for ours, the peer's and ours / peer."""
    return (("ours", summary["ours"], False), (peer, summary["rllib"], False),
            (f"ours/{peer}", summary["ratio"], True))


def load_columns(figures: dict, is_ratio: bool) -> list[str]:
    """Env steps/s sampled and trained, CPU utilization of the process tree and of the machine."""
    return [cell(figures["sampled_steps_per_second"], ".2f" if is_ratio else ",.0f"),
            cell(figures["trained_steps_per_second"], ".2f" if is_ratio else ",.0f"),
            cell(figures["cpu_utilization"], ".2f" if is_ratio else ".0%"),
            cell(figures["machine_cpu_utilization"], ".2f" if is_ratio else ".0%")]


def cost_columns(figures: dict, is_ratio: bool) -> list[str]:
    """Peak PSS (GB, or the ratio) and the time to the first update."""
    memory = figures["peak_pss_bytes"]
    memory = memory if memory is None or is_ratio else memory / 1e9
    return [cell(memory, ".2f"), cell(figures["first_update_seconds"], ".2f" if is_ratio else ".1f")]


def bound_rows(label: str, raw: float | None, shares: dict[str, dict], columns: int) -> list[str]:
    """The raw bound's row and each side's share of it, in a table of `columns` figure columns."""
    blank = " |" * (columns - 1)
    rows = [f"| {label} | raw bound (no learning) | {cell(raw, ',.0f')} |{blank}"]
    for side, share in shares.items():
        rows.append(f"| {label} | {side}/raw bound | {cell(share['sampled_steps_per_second'], '.2f')} | "
                    f"{cell(share['trained_steps_per_second'], '.2f')} |" + " |" * (columns - 2))
    return rows


def target_cell(figures: dict, is_ratio: bool) -> str:
    if figures["target_seconds"] is not None:
        steps = f"{figures['target_frames']:.2f}" if is_ratio else f"{figures['target_frames'] / 1e6:.2f}M"
        return f"{figures['target_seconds']:.{2 if is_ratio else 0}f} ({steps})"
    if is_ratio:
        return f"< {figures['target_seconds_below']:.2f}" if "target_seconds_below" in figures else "–"
    return f"not reached ({figures['target_reached']})" if figures["target_reached"] else "–"


def score_at(curve: list[dict], key: str, marks: tuple[int, ...], end: float) -> dict[str, float | None]:
    """The score rate of the last update (a `Progress` curve point) at or before each mark the run reached."""
    return {str(mark): next((point["score_rate"] for point in reversed(curve) if point[key] <= mark), None)
            for mark in marks if mark <= end}


def check_target(summary: dict, kind: str, limit: float, peer: str) -> tuple[str, float | None, str, bool]:
    """(label, value, shown, met) of one target on a summary with `ours`, the peer's figures and
    `ratio` (ours / peer); `kind` is one of sampled_ratio, trained_ratio, cpu_utilization,
    pss_ratio, first_update_seconds, raw_bound_fraction, target_time_ratio."""
    ratio, ours = summary["ratio"], summary["ours"]
    if kind in ("sampled_ratio", "trained_ratio"):
        value = ratio[f"{kind.split('_')[0]}_steps_per_second"]
        return f"env steps/s {kind.split('_')[0]} >= {limit:g}x {peer}'s", value, f"{cell(value, '.2f')}x", \
            value is not None and value >= limit
    if kind == "cpu_utilization":
        value = ours["cpu_utilization"]
        return f"CPU utilization >= {limit:.0%}", value, cell(value, ".0%"), value is not None and value >= limit
    if kind == "pss_ratio":
        value = ratio["peak_pss_bytes"]
        return f"peak PSS <= {limit}x {peer}'s", value, f"{cell(value, '.2f')}x", value is not None and value <= limit
    if kind == "first_update_seconds":
        value = ours["first_update_seconds"]
        return f"first update <= {limit:.0f} s from process start", value, f"{cell(value, '.1f')} s", \
            value is not None and value <= limit
    if kind == "raw_bound_fraction":
        value = summary.get("ours_of_raw_bound", {}).get("trained_steps_per_second")
        return f"env steps/s trained >= {limit:.0%} of the raw bound", value, cell(value, ".0%"), \
            value is not None and value >= limit
    value, bound = ratio["target_seconds"], ratio.get("target_seconds_below")  # target_time_ratio
    if value is None and bound is not None:
        return f"wall time to target <= {limit}x {peer}'s", bound, f"{peer} not reached, < {bound:.2f}x", bound <= limit
    return f"wall time to target <= {limit}x {peer}'s", value, f"{cell(value, '.2f')}x", \
        value is not None and value <= limit
