"""The one population workflow: the asynchronous EvoRL loop of the Lamarckian paper's Figure 1, for
every population algorithm (PBT+PPO, EMOGI, NSGA-II, the GA, ES, CMA-ES, game balancing, game
testing, the league).

An algorithm is a `PopulationProgram`: each generation it asks for requests (train these members
an interval, evaluate these genomes, train these policies from their parents' weights), the
workers answer them (`worker_pool`: in this process, forked, or Ray actors on any node), answers
are collected as they finish, and the program is told them all and decides (PBT's exploit and
explore, NSGA-II's selection). The workflow writes what the program reports to the run file (the
population rows of the generation, its metrics and the episodes its members recorded, which the
workers send with their answers, flushed together so that a generation is on disk whole or not at
all) and saves one checkpoint beside it: the program's state, the members that
live in the workers, the generation and the clock, after the last generation and after any
generation once `storage.checkpoint_interval_seconds` passed (sooner where saving is cheap, see
`Checkpointing`). `evolve --resume` loads it and goes on with the next generation.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..runtime.learner.checkpoint import save_run_state
from ..runtime.observers import GenerationObserver, GenerationReport
from ..storage import RunWriter
from ..storage.trajectories import EpisodeRecord
from .worker_pool import HostFactory, RayPool, Request, WorkerFailure, WorkerPool, make_pool

if TYPE_CHECKING:
    from .pool_growth import PoolGrowth

log = logging.getLogger(__name__)

@dataclass
class GenerationRecord:
    """What one generation adds to the run file and the progress output."""

    metrics: dict[str, float]
    env_frames: int  # the x axis of the generation's metric row (env frames, episodes or evaluations)
    rows: dict[str, np.ndarray] | None = None  # /population rows, one per individual
    line: str | None = None  # a progress line
    write: Callable[[Any], None] | None = None  # writes the program's own groups (its run writer's class)
    #: recorded episodes of the generation, tagged with whose they are (`storage.trajectories`)
    episodes: tuple[EpisodeRecord, ...] = ()


class PopulationProgram(Protocol):
    """What the workflow needs of a population algorithm."""

    kind: str  # the checkpoint's tag
    metric_names: tuple[str, ...]
    num_slots: int  # members living in the workers (0: the workers are stateless)

    def host_factory(self) -> HostFactory:
        """Builds the object every worker hosts, from its slots."""
        ...

    def start(self, pool: WorkerPool) -> None:
        """Before the first generation (of this process): configure the members."""
        ...

    def finished_reason(self) -> str | None:
        """Why the run is over (its budget is spent, its target reached), or None."""
        ...

    def ask(self) -> list[Request]:
        """The requests of the next generation."""
        ...

    def on_answer(self, index: int, answer: Any) -> None:
        """One answer, as soon as it arrives (progress output)."""
        ...

    def tell(self, answers: list[Any], pool: WorkerPool, wall_time: float) -> GenerationRecord:
        """All answers of the generation (a `WorkerFailure` where one failed): decide."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Plain data (arrays, numbers, strings, lists, dicts) from which `load_state_dict` continues."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class GenerationalProgram:
    """What a program that runs `config.algorithm.generations` generations of stateless requests
    shares: nothing to set up before a generation, no per-answer progress, and that end."""

    config: Any
    generation: int
    num_slots = 0

    def start(self, pool: WorkerPool) -> None:
        pass

    def on_answer(self, index: int, answer: Any) -> None:
        pass

    def finished_reason(self) -> str | None:
        total = self.config.algorithm.generations
        return f"all algorithm.generations={total} are done" if self.generation >= total else None


@dataclass
class PopulationRuntime:
    """Where the workers run and how long an answer may take (from a config's `runtime:`)."""

    mode: str = "serial"
    num_workers: int | None = None
    timeout_seconds: float | None = None
    ray_address: str | None = None
    join_folder: Path | None = None  # where nodes join the run: the Ray pool grows onto them

    @classmethod
    def of(cls, section: Any) -> PopulationRuntime:
        """From a config's `runtime:` section (`config.population.PopulationRuntimeConfig`)."""
        return cls(section.mode, section.num_workers, section.timeout_seconds, section.ray_address,
                   section.join_folder)


#: A checkpoint is saved once the time since the last one is this many times what saving took.
CHECKPOINT_COST_FACTOR = 10.0


@dataclass
class Checkpointing:
    """When to save: after the last generation, and after any generation once
    `interval_seconds` have passed since the last save, or sooner where saving is cheap (once ten
    times the last save's duration has passed): at most about a tenth of a run goes to
    checkpoints, and a killed or requeued run loses little. `interval_seconds` None: at the end only."""

    path: Path
    interval_seconds: float | None
    reserve_bytes: int = 0
    last: float = field(default_factory=time.monotonic)
    cost_seconds: float = 0.0

    def due(self, final: bool) -> bool:
        if final:
            return True
        if self.interval_seconds is None:
            return False
        return time.monotonic() - self.last >= min(self.interval_seconds, CHECKPOINT_COST_FACTOR * self.cost_seconds)

    def save(self, kind: str, state: dict[str, Any]) -> None:
        started = time.monotonic()
        save_run_state(self.path, kind, state, self.reserve_bytes)
        self.last = time.monotonic()
        self.cost_seconds = self.last - started


class HostedMembers:
    """The members a worker hosts, by slot (PBT's learners, the league's): what the workflow's
    checkpoint reads from every worker and gives back on resume. Each member has `checkpoint()`,
    `restore(state)` and `close()`."""

    members: dict[int, Any]

    def checkpoints(self) -> list[Any]:
        """Every member's checkpoint, in slot order."""
        return [self.members[slot].checkpoint() for slot in sorted(self.members)]

    def restore_all(self, states: list[Any]) -> None:
        for slot, state in zip(sorted(self.members), states):
            self.members[slot].restore(state)

    def close(self) -> None:
        for member in self.members.values():
            member.close()


def member_states(pool: WorkerPool, num_slots: int) -> list[Any]:
    """Every member's state, by slot, from the workers hosting them."""
    states: list[Any] = [None] * num_slots
    for worker_slots, answer in zip(pool.slots, pool.each_worker("checkpoints")):
        for slot, state in zip(worker_slots, answer):
            states[slot] = state
    return states


def restore_members(pool: WorkerPool, states: list[Any], workers: Sequence[int] | None = None) -> None:
    """Give the members of `workers` (default every worker) the states of their slots in `states`."""
    pool.gather([Request("restore_all", ([states[slot] for slot in pool.slots[worker]],), worker)
                 for worker in (range(pool.num_workers) if workers is None else workers)])


def lost_workers(answers: Sequence[Any]) -> list[int]:
    """Workers whose request failed because they died or hung (a fresh host has taken their place)."""
    return sorted({answer.worker for answer in answers if isinstance(answer, WorkerFailure) and answer.replaced})


def resume_lost_members(pool: WorkerPool, requests: Sequence[Request], answers: list[Any], kept: list[Any],
                        report: Callable[[str], None] | None) -> list[int]:
    """The members of workers that died or hung during a generation (a node that left or failed)
    resume on the fresh workers in their place from `kept`, their states at the end of the last
    generation, and run the generation's requests again; nothing of the lost part of the
    generation counts. Answers that fail again stay failures, for the program to decide on. The
    indices of the requests run again."""
    lost = lost_workers(answers)
    if not lost:
        return []
    for worker in lost:
        line = (f"worker {worker} (slots {pool.slots[worker]}) was lost: its members resume from the end of the "
                f"last generation on a fresh worker ({pool.host_names[worker]})")
        log.warning("%s", line)
        if report is not None:
            report(line)
    restore_members(pool, kept, lost)
    again = [index for index, answer in enumerate(answers) if isinstance(answer, WorkerFailure) and answer.worker in lost]
    for position, answer in pool.run([requests[index] for index in again]):
        answers[again[position]] = answer
    return again


def _pool_growth(runtime: PopulationRuntime, pool: WorkerPool) -> PoolGrowth | None:
    """The pool's growth onto joined nodes, where the run has a join folder and a Ray pool (imported
    here: it imports Ray, which serial and forked runs never load)."""
    if runtime.join_folder is None or not isinstance(pool, RayPool):
        return None
    from ..storage.join_folder import JoinFolder
    from .pool_growth import PoolGrowth

    return PoolGrowth(JoinFolder(runtime.join_folder), pool)


def run_population(program: PopulationProgram, runtime: PopulationRuntime, writer: RunWriter | None = None,
                   checkpointing: Checkpointing | None = None, resume: dict[str, Any] | None = None,
                   report: Callable[[str], None] | None = None, pool: WorkerPool | None = None,
                   observers: Sequence[GenerationObserver] = ()) -> float:
    """Run `program` to its end; returns the run's wall time in seconds (earlier processes included).

    `resume` is a state saved by an earlier process of this run: the program, its members and the
    clock continue from it. A pool given by the caller is used and left open. `observers` (the live
    sinks: TensorBoard, W&B, MLflow) are told each generation once the run file has it."""
    owns_pool = pool is None
    if pool is None:
        pool = make_pool(runtime.mode, program.host_factory(), program.num_slots, runtime.num_workers,
                         runtime.timeout_seconds, runtime.ray_address)
    generation, wall_before = 0, 0.0
    try:
        if resume is not None:
            program.load_state_dict(resume["program"])
            generation, wall_before = int(resume["generation"]), float(resume["wall_time"])
            if program.num_slots:
                restore_members(pool, list(resume["members"]))
        program.start(pool)
        # Members live in workers that may be lost (forked or Ray workers): their last states are
        # kept here, so that a lost worker's members resume elsewhere (`resume_lost_members`).
        keeps_members = program.num_slots > 0 and pool.loses_workers
        kept = member_states(pool, program.num_slots) if keeps_members else []
        growth = _pool_growth(runtime, pool)
        start = time.monotonic() - wall_before
        while program.finished_reason() is None:
            if growth is not None:  # nodes joined or leave: the members move, with their states
                renewed, line = growth.follow()
                if renewed and keeps_members:
                    restore_members(pool, kept, renewed)
                if line is not None and report is not None:
                    report(line)
            requests = program.ask()
            answers: list[Any] = [None] * len(requests)
            for index, answer in pool.run(requests):
                answers[index] = answer
                if not (keeps_members and lost_workers([answer])):  # run again below
                    program.on_answer(index, answer)
            if keeps_members:
                retried = resume_lost_members(pool, requests, answers, kept, report)
                for index in retried:
                    program.on_answer(index, answers[index])
            record = program.tell(answers, pool, time.monotonic() - start)
            if keeps_members:
                kept = member_states(pool, program.num_slots)
            wall_time = time.monotonic() - start
            if writer is not None:
                if record.rows is not None:
                    writer.append_population(record.rows)
                if record.write is not None:
                    record.write(writer)
                for episode in record.episodes:  # the run file is written here only: the workers send theirs
                    writer.append_episode(episode)
                writer.append_many(record.metrics, env_frames=record.env_frames, policy_version=generation,
                                   wall_time=wall_time)
                writer.flush()  # before the checkpoint: the file holds every row the checkpoint covers
            if observers:
                members = (program.num_slots > 0 and record.rows is not None
                           and len(record.rows["id"]) == program.num_slots)
                told = GenerationReport(generation, record.env_frames, wall_time, record.metrics, record.rows, members)
                for observer in observers:
                    observer.on_generation_end(told)
            generation += 1
            if checkpointing is not None and checkpointing.due(program.finished_reason() is not None):
                members = member_states(pool, program.num_slots) if program.num_slots else []
                checkpointing.save(program.kind, {"generation": generation, "wall_time": wall_time,
                                                  "program": program.state_dict(), "members": members})
            if report is not None and record.line:
                report(record.line)
        return time.monotonic() - start
    finally:
        if owns_pool:
            pool.close()
