"""PBT+PPO: a population of PPO learners whose hyperparameters and weights evolve by PBT.

The loop is synchronous by interval: every member trains `algorithm.interval_env_frames` env
frames (in parallel on Ray workers, or one after another here), the population's scores go to
the ask/tell `ec.pbt.PBT`, the slots it names copy the weights of better members (exploit) and
train on with explored hyperparameters. Every interval, every member is a row of the run file's
`/population` (id, parent id, hyperparameters by name, score, env frames, wall time, worker), so
that the lineage and hyperparameter schedule of each policy can be rebuilt afterwards. At the end
of every interval the whole state (members, PBT, clock) is saved beside the run file, so that
`evolve --resume` continues after the last finished interval.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..config import PBTConfig
from ..ec.pbt import PBT, Hyperparameter
from ..runtime.checkpoint import save_run_state
from ..storage import RunWriter
from .hosts import HostPool, RayHosts, SerialHosts
from .member import IntervalResult

#: The `kind` of a PBT run's checkpoint (`runtime.checkpoint.save_run_state`).
CHECKPOINT_KIND = "pbt"
#: Metrics of a PBT run, one row per interval.
METRIC_NAMES: tuple[str, ...] = ("best_return", "median_return", "copies", "env_frames_per_second")


def search_space(config: PBTConfig) -> list[Hyperparameter]:
    return [Hyperparameter(name, r.low, r.high, r.log, r.initial_low, r.initial_high)
            for name, r in config.algorithm.hyperparameters.items()]


def make_pbt(config: PBTConfig) -> PBT:
    algorithm = config.algorithm
    return PBT(search_space(config), algorithm.population_size, np.random.default_rng(config.seed),
               exploit=algorithm.exploit, explore=algorithm.explore,
               truncation_fraction=algorithm.truncation_fraction, perturb_factors=algorithm.perturb_factors,
               resample_probability=algorithm.resample_probability, ttest_alpha=algorithm.ttest_alpha,
               ttest_window=algorithm.ttest_window)


def population_shape(config: PBTConfig) -> tuple[int, int, tuple[str, ...]]:
    """The run file's population layout: named hyperparameters as the genome, one score."""
    names = tuple(config.algorithm.hyperparameters)
    return len(names), 1, names


@dataclass
class IntervalReport:
    """One interval of the whole population, for progress lines and tests."""

    interval: int
    wall_time: float  # seconds since the run started, at the end of the interval
    results: list[IntervalResult]
    ids: np.ndarray
    parent_ids: np.ndarray
    hyperparameters: list[dict[str, float]]
    copies: int

    @property
    def scores(self) -> np.ndarray:
        return np.array([r.score for r in self.results])

    def best_slot(self) -> int:
        scores = self.scores
        return int(np.nanargmax(scores)) if not np.all(np.isnan(scores)) else 0


@dataclass
class PBTResult:
    intervals: int
    wall_time_seconds: float
    env_frames: int  # all members together
    best_return: float
    best_id: int
    #: per slot: run seconds at which it first reached stop.target_return (None: never)
    reached_seconds: list[float | None] = field(default_factory=list)
    reached_frames: list[int | None] = field(default_factory=list)
    started_at: float = 0.0  # time.time() when training started, the zero of reached_seconds

    @property
    def first_reached_seconds(self) -> float | None:
        times = [t for t in self.reached_seconds if t is not None]
        return min(times) if times else None

    def median_reached_seconds(self) -> float:
        """Median over members of the time to target; infinite when fewer than half reached it."""
        times = sorted(math.inf if t is None else t for t in self.reached_seconds)
        return float(np.median(times)) if times else math.inf


def _rows(report: IntervalReport, names: tuple[str, ...], workers: dict[int, int],
          worker_hosts: dict[int, str]) -> dict[str, np.ndarray]:
    count = len(report.results)
    return {
        "generation": np.full(count, report.interval),
        "id": report.ids,
        "parent_ids": np.stack([report.parent_ids, np.full(count, -1)], axis=1),
        "genome": np.array([[values[name] for name in names] for values in report.hyperparameters]),
        "objectives": report.scores[:, None],
        "wall_time": np.array([r.wall_seconds for r in report.results]),
        "worker": np.array([workers[r.slot] for r in report.results]),
        "host": np.array([worker_hosts[r.slot] for r in report.results], dtype=object),
        "env_frames": np.array([r.env_frames for r in report.results]),
    }


def make_hosts(config: PBTConfig) -> HostPool:
    if config.runtime.mode == "serial":
        return SerialHosts(config)
    if config.runtime.mode == "fork":
        from .fork_hosts import ForkHosts

        return ForkHosts(config)
    return RayHosts(config)


def run_pbt(config: PBTConfig, writer: RunWriter | None = None,
            on_interval: Callable[[IntervalReport], None] | None = None,
            hosts: HostPool | None = None, checkpoint: Path | None = None,
            resume: dict[str, Any] | None = None, reserve_bytes: int = 0) -> PBTResult:
    """Train the population until the stop rule holds; record every interval in `writer`.

    With `checkpoint`, the state of the run is saved there at the end of every interval (after
    the run file was flushed); with `resume` (such a saved state), the run continues after the
    interval it was saved at, with the members, the PBT state and the clock as they were then.
    A checkpoint that would leave less than `reserve_bytes` free raises StorageFullError."""
    stop, algorithm = config.stop, config.algorithm
    pbt = make_pbt(config)
    owns_hosts = hosts is None
    hosts = make_hosts(config) if hosts is None else hosts
    start = time.monotonic()
    size = algorithm.population_size
    reached_seconds: list[float | None] = [None] * size
    reached_frames: list[int | None] = [None] * size
    interval, wall_before = 0, 0.0
    report: IntervalReport | None = None
    try:
        if resume is not None:
            pbt.load_state_dict(resume["pbt"])
            hosts.restore(resume["members"])
            interval, wall_before = int(resume["interval"]), float(resume["wall_time"])
            reached_seconds, reached_frames = list(resume["reached_seconds"]), list(resume["reached_frames"])
            if not resume["told"]:  # the saved interval ended the run before its exploit: a longer run does it now
                sources = pbt.tell(resume["scores"], resume["samples"])
                if (sources >= 0).any():
                    hosts.copy(sources)
        hosts.set_hyperparameters(pbt.as_dicts())
        start = time.monotonic() - wall_before  # members exist and know their hyperparameters: training starts now
        started_at = time.time() - wall_before
        while True:
            round_start = time.monotonic() - start
            remaining = None if stop.max_wall_seconds is None else max(0.0, stop.max_wall_seconds - round_start)
            results = hosts.train_interval(algorithm.interval_env_frames, stop.until == "best", remaining)
            results = sorted(results, key=lambda r: r.slot)
            for r in results:
                if r.reached_seconds is not None and reached_seconds[r.slot] is None:
                    reached_seconds[r.slot] = round_start + r.reached_seconds
                    reached_frames[r.slot] = r.reached_frames
            report = IntervalReport(interval, time.monotonic() - start, results, pbt.ids.copy(),
                                    pbt.parent_ids.copy(), pbt.as_dicts(), 0)
            if writer is not None:
                writer.append_population(_rows(report, pbt.names, hosts.workers, hosts.worker_hosts))
            frames = sum(r.env_frames for r in results)
            done = _should_stop(config, results, reached_seconds, report.wall_time)
            samples = [np.array(r.episode_returns, dtype=np.float64) for r in results]
            if not done:
                sources = pbt.tell(report.scores, samples)
                report.copies = int((sources >= 0).sum())
                if report.copies:
                    hosts.copy(sources)
                    hosts.set_hyperparameters(pbt.as_dicts())
            if writer is not None:
                scores = report.scores
                finite = scores[~np.isnan(scores)]
                writer.append_many({
                    "best_return": float(finite.max()) if finite.size else math.nan,
                    "median_return": float(np.median(finite)) if finite.size else math.nan,
                    "copies": float(report.copies),
                    "env_frames_per_second": frames / max(report.wall_time, 1e-9),
                }, env_frames=frames, policy_version=interval, wall_time=report.wall_time)
                writer.flush()
            if checkpoint is not None:  # after the flush: the file holds every row the checkpoint covers
                save_run_state(checkpoint, CHECKPOINT_KIND, {
                    "interval": interval + 1, "wall_time": report.wall_time, "pbt": pbt.state_dict(),
                    "members": hosts.checkpoints(), "reached_seconds": reached_seconds,
                    "reached_frames": reached_frames, "told": not done, "scores": report.scores,
                    "samples": samples}, reserve_bytes)
            if on_interval is not None:
                on_interval(report)
            interval += 1
            if done:
                break
    finally:
        if owns_hosts:
            hosts.close()
    assert report is not None
    best = report.best_slot()
    return PBTResult(interval, time.monotonic() - start, sum(r.env_frames for r in report.results),
                     float(report.scores[best]), int(report.ids[best]), reached_seconds, reached_frames, started_at)


def mismatch(config: PBTConfig, state: dict[str, Any]) -> str | None:
    """Why a saved run cannot continue under `config` (a changed population or search space), or None."""
    size, names = config.algorithm.population_size, list(config.algorithm.hyperparameters)
    if len(state["members"]) != size:
        return f"algorithm.population_size is {size}, the saved run has {len(state['members'])} members"
    if np.shape(state["pbt"]["hyperparameters"])[1] != len(names):
        return f"algorithm.hyperparameters {names} are not the saved run's searched hyperparameters"
    return None


def finished_reason(config: PBTConfig, state: dict[str, Any]) -> str | None:
    """Why a saved run has nothing left to do under `config` (its stop rule already holds), or None."""
    stop = config.stop
    if all(int(member["env_frames"]) >= stop.total_env_frames for member in state["members"]):
        return f"every member has trained stop.total_env_frames={stop.total_env_frames:,} frames"
    if stop.max_wall_seconds is not None and float(state["wall_time"]) >= stop.max_wall_seconds:
        return f"the run has used stop.max_wall_seconds={stop.max_wall_seconds:g}"
    reached = [seconds is not None for seconds in state["reached_seconds"]]
    if stop.target_return is not None and (any(reached) if stop.until == "best" else all(reached)):
        return f"stop.target_return={stop.target_return:g} was reached"
    return None


def _should_stop(config: PBTConfig, results: list[IntervalResult], reached_seconds: list[float | None],
                 wall_time: float) -> bool:
    stop = config.stop
    if stop.max_wall_seconds is not None and wall_time >= stop.max_wall_seconds:
        return True
    if all(r.env_frames >= stop.total_env_frames for r in results):
        return True
    if stop.target_return is None:
        return False
    reached = [t is not None for t in reached_seconds]
    return any(reached) if stop.until == "best" else all(reached)


def progress_line(report: IntervalReport, names: tuple[str, ...]) -> str:
    """One line per interval: frames, best and median score, copies, the best member's values."""
    scores = report.scores
    finite = scores[~np.isnan(scores)]
    best = report.best_slot()
    median = f"{np.median(finite):.1f}" if finite.size else "n/a"
    values = " ".join(f"{name}={report.hyperparameters[best][name]:.3g}" for name in names)
    best_score = "n/a" if np.isnan(scores[best]) else f"{scores[best]:.1f}"
    frames = sum(r.env_frames for r in report.results)
    return (f"interval {report.interval:>3}  frames {frames:>10,}  best {best_score} (id {report.ids[best]}, "
            f"{values})  median {median}  copies {report.copies}  {report.wall_time:.1f} s")
