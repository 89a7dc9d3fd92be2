"""PBT+PPO: a population of PPO learners whose hyperparameters and weights evolve by PBT, as a
program of the population workflow (`population.workflow`).

A generation is an interval: every worker trains its members `algorithm.interval_env_frames` env
frames (all workers at once), the population's scores go to the ask/tell `ec.pbt.PBT`, the slots it
names copy the weights of better members (exploit) and train on with explored hyperparameters.
Every interval, every member is a row of the run file's `/population` (id, parent id,
hyperparameters by name, score, env frames, wall time, worker), so that the lineage and
hyperparameter schedule of each policy can be rebuilt afterwards; the episodes the members recorded
(`storage.trajectories`) go to `/trajectories/main`, each tagged with its member's id and the
interval, as `/population` names them. The workflow's checkpoint holds
the members (from their workers), PBT's state and the clock, so that `evolve --resume` continues
after the last saved interval.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..config import PBTConfig
from ..ec.pbt import PBT, Hyperparameter
from ..population.worker_pool import Request, WorkerError, WorkerFailure, WorkerPool
from ..population.workflow import GenerationRecord, PopulationRuntime, run_population
from ..runtime.run_shape import POLICY_ID, spaces_of
from ..runtime.runners.recording import tagged_record, trajectory_writer_options
from ..storage import RunWriter
from ..storage.trajectories import EpisodeRecord
from .member import IntervalResult, member_run_config
from .worker_members import WorkerMembers

#: The `kind` of a PBT run's checkpoint (`runtime.learner.checkpoint.save_run_state`).
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


def trajectory_options(config: PBTConfig) -> dict[str, Any]:
    """The run file's `/trajectories/main`, which every member's recorded episodes share (they act
    in one environment), when `storage.trajectories.every_episodes` records any."""
    run_config = member_run_config(config, 0)
    return trajectory_writer_options(run_config, spaces_of(run_config), POLICY_ID)


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


def _rows(report: IntervalReport, names: tuple[str, ...], pool: WorkerPool) -> dict[str, np.ndarray]:
    count = len(report.results)
    workers = [pool.worker_of(r.slot) for r in report.results]
    return {
        "generation": np.full(count, report.interval),
        "id": report.ids,
        "parent_ids": np.stack([report.parent_ids, np.full(count, -1)], axis=1),
        "genome": np.array([[values[name] for name in names] for values in report.hyperparameters]),
        "objectives": report.scores[:, None],
        "wall_time": np.array([r.wall_seconds for r in report.results]),
        "worker": np.array([pool.pids[worker] for worker in workers]),
        "host": np.array([pool.host_names[worker] for worker in workers], dtype=object),
        "env_frames": np.array([r.env_frames for r in report.results]),
    }


def _recorded(report: IntervalReport, pool: WorkerPool, wall_time: float) -> Iterator[EpisodeRecord]:
    """The episodes the members recorded in the interval, tagged with the member's id and the interval."""
    for r in report.results:
        worker = pool.worker_of(r.slot)
        for answer in r.recorded:
            yield tagged_record(POLICY_ID, answer, worker, pool.host_names[worker], wall_time, int(report.ids[r.slot]),
                                report.interval)


class PBTProgram:
    """PBT+PPO for the population workflow; its members live in the workers (`WorkerMembers`)."""

    kind = CHECKPOINT_KIND
    metric_names = METRIC_NAMES

    def __init__(self, config: PBTConfig, on_interval: Callable[[IntervalReport], None] | None = None) -> None:
        self.config, self.on_interval = config, on_interval
        self.pbt = make_pbt(config)
        self.num_slots = config.algorithm.population_size
        self.interval, self.wall_time = 0, 0.0
        self.reached_seconds: list[float | None] = [None] * self.num_slots
        self.reached_frames: list[int | None] = [None] * self.num_slots
        self.member_frames = [0] * self.num_slots
        self.told, self.scores, self.samples = True, np.zeros(0), []  # an interval that ended the run is not told
        self.stopped: str | None = None
        self.last: IntervalReport | None = None
        self._clock = time.monotonic()
        self._round_start = 0.0
        self._pool: WorkerPool | None = None  # its workers may change between intervals (`pool_growth`)

    def host_factory(self) -> Callable[[list[int]], WorkerMembers]:
        return functools.partial(WorkerMembers, self.config)

    def start(self, pool: WorkerPool) -> None:
        self._pool = pool
        if not self.told:  # the saved interval ended the run before its exploit: a longer run does it now
            self._exploit(pool, self.pbt.tell(self.scores, self.samples))
            self.told = True
        self._set_hyperparameters(pool)
        self._clock = time.monotonic() - self.wall_time  # members exist and know their values: training starts now

    def finished_reason(self) -> str | None:
        if self.stopped is not None:
            return self.stopped
        stop = self.config.stop
        if self.interval and all(frames >= stop.total_env_frames for frames in self.member_frames):
            return f"every member has trained stop.total_env_frames={stop.total_env_frames:,} frames"
        if stop.max_wall_seconds is not None and self.wall_time >= stop.max_wall_seconds:
            return f"the run has used stop.max_wall_seconds={stop.max_wall_seconds:g}"
        reached = [seconds is not None for seconds in self.reached_seconds]
        if stop.target_return is not None and (any(reached) if stop.until == "best" else all(reached)):
            return f"stop.target_return={stop.target_return:g} was reached"
        return None

    def ask(self) -> list[Request]:
        stop = self.config.stop
        self._round_start = time.monotonic() - self._clock
        remaining = None if stop.max_wall_seconds is None else max(0.0, stop.max_wall_seconds - self._round_start)
        arguments = (self.config.algorithm.interval_env_frames, stop.until == "best", remaining)
        assert self._pool is not None, "start() is given the pool"
        return [Request("train_interval", arguments, worker) for worker in range(self._pool.num_workers)]

    def on_answer(self, index: int, answer: Any) -> None:
        pass

    def tell(self, answers: list[Any], pool: WorkerPool, wall_time: float) -> GenerationRecord:
        for answer in answers:  # a member's weights died with its worker: the run cannot go on
            if isinstance(answer, WorkerFailure):
                raise WorkerError(f"PBT worker {answer.pid} (slots {pool.slots[answer.worker]}): {answer.reason}")
        results = sorted((IntervalResult(**fields) for batch in answers for fields in batch), key=lambda r: r.slot)
        for r in results:
            self.member_frames[r.slot] = r.env_frames
            if r.reached_seconds is not None and self.reached_seconds[r.slot] is None:
                self.reached_seconds[r.slot] = self._round_start + r.reached_seconds
                self.reached_frames[r.slot] = r.reached_frames
        self.wall_time = wall_time
        report = IntervalReport(self.interval, wall_time, results, self.pbt.ids.copy(), self.pbt.parent_ids.copy(),
                                self.pbt.as_dicts(), 0)
        rows = _rows(report, self.pbt.names, pool)
        self.interval += 1
        self.scores, self.samples = report.scores, [np.array(r.episode_returns, dtype=np.float64) for r in results]
        self.told = self.finished_reason() is None
        if self.told:
            report.copies = self._exploit(pool, self.pbt.tell(self.scores, self.samples))
        self.last = report
        if self.on_interval is not None:
            self.on_interval(report)
        episodes = tuple(_recorded(report, pool, wall_time))
        frames = sum(r.env_frames for r in results)
        finite = report.scores[~np.isnan(report.scores)]
        metrics = {"best_return": float(finite.max()) if finite.size else math.nan,
                   "median_return": float(np.median(finite)) if finite.size else math.nan,
                   "copies": float(report.copies), "env_frames_per_second": frames / max(wall_time, 1e-9)}
        return GenerationRecord(metrics, frames, rows, episodes=episodes)

    def _exploit(self, pool: WorkerPool, sources: np.ndarray) -> int:
        """Copy the weights of each source into the slot that takes them (all sources are read
        before any slot is overwritten: a slot may be both), then set everyone's values."""
        wanted = sorted({int(source) for source in sources if source >= 0})
        if not wanted:
            return 0
        states = dict(zip(wanted, pool.gather([Request("state", (slot,), pool.worker_of(slot)) for slot in wanted])))
        pool.gather([Request("load_state", (slot, states[int(source)]), pool.worker_of(slot))
                     for slot, source in enumerate(sources) if source >= 0])
        self._set_hyperparameters(pool)
        return len([source for source in sources if source >= 0])

    def _set_hyperparameters(self, pool: WorkerPool) -> None:
        pool.gather([Request("set_hyperparameters", (slot, values), pool.worker_of(slot))
                     for slot, values in enumerate(self.pbt.as_dicts())])

    def state_dict(self) -> dict[str, Any]:
        return {"interval": self.interval, "wall_time": self.wall_time, "pbt": self.pbt.state_dict(),
                "reached_seconds": self.reached_seconds, "reached_frames": self.reached_frames,
                "member_frames": self.member_frames, "told": self.told, "scores": self.scores,
                "samples": self.samples}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pbt.load_state_dict(state["pbt"])
        self.interval, self.wall_time = int(state["interval"]), float(state["wall_time"])
        self.reached_seconds, self.reached_frames = list(state["reached_seconds"]), list(state["reached_frames"])
        self.member_frames = [int(frames) for frames in state["member_frames"]]
        self.told, self.scores, self.samples = bool(state["told"]), np.asarray(state["scores"]), list(state["samples"])

    def result(self, wall_time: float, started_at: float) -> PBTResult:
        assert self.last is not None
        best = self.last.best_slot()
        return PBTResult(self.interval, wall_time, sum(r.env_frames for r in self.last.results),
                         float(self.last.scores[best]), int(self.last.ids[best]), self.reached_seconds,
                         self.reached_frames, started_at)


def run_pbt(config: PBTConfig, writer: RunWriter | None = None,
            on_interval: Callable[[IntervalReport], None] | None = None, pool: WorkerPool | None = None) -> PBTResult:
    """Train the population until the stop rule holds, recording every interval in `writer` (the
    library entry point; `evolve` adds the checkpoint and resume)."""
    program = PBTProgram(config, on_interval)
    started_at = time.time()
    wall_time = run_population(program, PopulationRuntime.of(config.runtime), writer, pool=pool)
    return program.result(wall_time, started_at)


def mismatch(config: PBTConfig, state: dict[str, Any]) -> str | None:
    """Why a saved run cannot continue under `config` (a changed population or search space), or None."""
    size, names = config.algorithm.population_size, list(config.algorithm.hyperparameters)
    if len(state["members"]) != size:
        return f"algorithm.population_size is {size}, the saved run has {len(state['members'])} members"
    if np.shape(state["program"]["pbt"]["hyperparameters"])[1] != len(names):
        return f"algorithm.hyperparameters {names} are not the saved run's searched hyperparameters"
    return None


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
