"""The workers a population runs on: processes that each host one object (the members of a PBT
population, an evaluator, a policy trainer) and answer calls on it, in this process, forked from
it, or as Ray actors on any node of the cluster.

Every population algorithm reaches its workers through this one pool, so how members are hosted,
how a dead or hung worker is noticed and replaced, and how answers are collected as they finish
is written once. A request names a method of the hosted object, its arguments and either the
worker that must answer it (the one hosting a member) or none (any idle worker: stateless
evaluations queue up). Each worker answers one request at a time; `run` yields (index, answer) as
answers arrive, in any order. A request that raises answers with a `WorkerFailure`; a worker that
dies or outlives the timeout does too, and is replaced by a fresh host from the factory, so a
stateless population goes on, and one whose members live in the workers decides itself whether to
stop.

Forked workers talk over pipes in the wire format (a msgpack header and raw array frames, nothing
pickled, `pipe_messages`), so hosted objects take and return plain data: dicts, lists, numbers,
strings and numpy arrays. A forked worker starts with everything this process imported, in
milliseconds; a Ray worker is a fresh interpreter, but may run on any node.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import socket
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from .pipe_messages import receive, send

#: Builds the object one worker hosts, from the population slots it is given (empty when stateless).
HostFactory = Callable[[list[int]], Any]
POLL_SECONDS = 0.5
START_TIMEOUT_SECONDS = 600.0


@dataclass(frozen=True)
class Request:
    method: str
    args: tuple[Any, ...] = ()
    worker: int | None = None  # None: any idle worker


@dataclass(frozen=True)
class WorkerFailure:
    """The answer of a request that raised, or whose worker died or hung (then `replaced`)."""

    worker: int
    pid: int
    reason: str
    replaced: bool = False


class WorkerError(RuntimeError):
    """A request whose answer the population cannot do without failed."""


def assign_slots(num_slots: int, num_workers: int) -> list[list[int]]:
    """Round robin: worker w hosts slots w, w + num_workers, ..."""
    return [list(range(worker, num_slots, num_workers)) for worker in range(num_workers)]


class WorkerPool:
    """The dispatch every backend shares; backends start calls, report answers and replace workers."""

    #: Whether a worker can be lost (its process dies or hangs, its node leaves) and replaced.
    loses_workers = True

    def __init__(self, slots: list[list[int]], timeout_seconds: float | None) -> None:
        self.slots, self.timeout_seconds = slots, timeout_seconds
        self.pids: list[int] = [os.getpid()] * len(slots)
        self.host_names: list[str] = [socket.gethostname()] * len(slots)
        self.replacements = 0

    @property
    def num_workers(self) -> int:
        return len(self.slots)

    def worker_of(self, slot: int) -> int:
        return next(worker for worker, slots in enumerate(self.slots) if slot in slots)

    def run(self, requests: Sequence[Request]) -> Iterator[tuple[int, Any]]:
        """(index, answer) for every request, as answers arrive; failures answer a WorkerFailure."""
        pinned: dict[int, deque[int]] = {worker: deque() for worker in range(self.num_workers)}
        free: deque[int] = deque()
        for index, request in enumerate(requests):
            (free if request.worker is None else pinned[request.worker]).append(index)
        busy: dict[int, tuple[int, float]] = {}  # worker -> (request index, start)
        remaining = len(requests)
        while remaining:
            for worker in range(self.num_workers):
                queue = pinned[worker] or free
                if worker not in busy and queue:
                    index = queue.popleft()
                    self._start(worker, requests[index].method, requests[index].args)
                    busy[worker] = (index, time.monotonic())
            for worker, answer in self._answers(list(busy)):
                index, _ = busy.pop(worker)
                remaining -= 1
                yield index, self._after_failure(answer) if isinstance(answer, WorkerFailure) else answer
            if self.timeout_seconds is not None:
                now = time.monotonic()
                for worker, (index, started) in list(busy.items()):
                    if now - started > self.timeout_seconds:
                        busy.pop(worker)
                        remaining -= 1
                        yield index, self._after_failure(WorkerFailure(
                            worker, self.pids[worker], f"sent no answer within {self.timeout_seconds:g} s "
                                                       "(runtime.timeout_seconds)", replaced=True))

    def gather(self, requests: Sequence[Request]) -> list[Any]:
        """Every answer, in request order; the first failure raises WorkerError."""
        answers: list[Any] = [None] * len(requests)
        for index, answer in self.run(requests):
            if isinstance(answer, WorkerFailure):
                slots = self.slots[answer.worker]
                hosting = f" (slots {slots})" if slots else ""
                raise WorkerError(f"worker {answer.pid}{hosting}, {requests[index].method}: {answer.reason}")
            answers[index] = answer
        return answers

    def each_worker(self, method: str, *args: Any) -> list[Any]:
        """The same call on every worker, their answers in worker order."""
        return self.gather([Request(method, args, worker) for worker in range(self.num_workers)])

    def _after_failure(self, failure: WorkerFailure) -> WorkerFailure:
        if failure.replaced:  # a dead or hung worker: a fresh host takes its place
            self._replace(failure.worker)
            self.replacements += 1
        return failure

    def _start(self, worker: int, method: str, args: tuple[Any, ...]) -> None:
        raise NotImplementedError

    def _answers(self, busy: list[int]) -> list[tuple[int, Any]]:
        """Answers that arrived from `busy` workers, waiting up to POLL_SECONDS for the first."""
        raise NotImplementedError

    def _replace(self, worker: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


def _call(host: Any, method: str, args: tuple[Any, ...]) -> Any:
    if method.startswith("_"):
        raise ValueError(f"{method!r} is not a method a worker answers")
    return getattr(host, method)(*args)


def _close_host(host: Any) -> None:
    close = getattr(host, "close", None)
    if close is not None:
        close()


class InProcessPool(WorkerPool):
    """One host in this process, answering each request when it is started: debuggable, and the
    reference the other backends reproduce. It cannot outlive a hung call."""

    loses_workers = False

    def __init__(self, factory: HostFactory, num_slots: int) -> None:
        super().__init__([list(range(num_slots))], None)
        self.factory = factory
        self.host = factory(self.slots[0])
        self._ready: list[tuple[int, Any]] = []

    def _start(self, worker: int, method: str, args: tuple[Any, ...]) -> None:
        try:
            self._ready.append((worker, _call(self.host, method, args)))
        except Exception as error:
            self._ready.append((worker, WorkerFailure(worker, os.getpid(), f"{type(error).__name__}: {error}")))

    def _answers(self, busy: list[int]) -> list[tuple[int, Any]]:
        ready, self._ready = self._ready, []
        return ready

    def _replace(self, worker: int) -> None:
        _close_host(self.host)
        self.host = self.factory(self.slots[0])

    def close(self) -> None:
        _close_host(self.host)


def _serve(factory: HostFactory, slots: list[int], connection: Connection) -> None:
    """A forked worker: build the host, then answer requests until `close` or the driver is gone.
    Ctrl-C is the driver's to handle: it closes the workers."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        host = factory(slots)
    except Exception as error:  # the driver raises it with the worker's message
        send(connection, "error", f"{type(error).__name__}: {error}")
        return
    send(connection, "ok", os.getpid())
    while True:
        try:
            method, arguments = receive(connection)
        except (EOFError, OSError):
            _close_host(host)
            return
        if method == "close":
            _close_host(host)
            send(connection, "ok", None)
            return
        try:
            answer = _call(host, method, tuple(arguments))
        except Exception as error:
            send(connection, "error", f"{type(error).__name__}: {error}")
            continue
        send(connection, "ok", answer)


class ForkPool(WorkerPool):
    """Workers forked from this process (one machine), one pipe each."""

    def __init__(self, factory: HostFactory, slots: list[list[int]], timeout_seconds: float | None) -> None:
        super().__init__(slots, timeout_seconds)
        self.factory = factory
        self.context = multiprocessing.get_context("fork")
        self.connections: list[Connection | None] = [None] * len(slots)
        self.processes: list[Any] = [None] * len(slots)
        try:
            for worker in range(len(slots)):
                self._spawn(worker)
            for worker in range(len(slots)):
                self._hello(worker)
        except BaseException:
            self.close()
            raise

    def _spawn(self, worker: int) -> None:
        parent_end, child_end = self.context.Pipe(duplex=True)
        # What the driver imported moves out of the collector's reach before the fork: a worker's
        # collections then neither walk those objects again nor copy their pages by touching them.
        gc.freeze()
        try:
            process = self.context.Process(target=_serve, args=(self.factory, self.slots[worker], child_end),
                                           daemon=True)
            process.start()
        finally:
            gc.unfreeze()
        child_end.close()
        self.connections[worker], self.processes[worker] = parent_end, process

    def _hello(self, worker: int) -> None:
        """The worker's first answer: its pid once its host is built, or why it could not be."""
        connection, process = self.connections[worker], self.processes[worker]
        assert connection is not None
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while not connection.poll(POLL_SECONDS):
            if not process.is_alive() or time.monotonic() > deadline:
                raise WorkerError(f"worker {process.pid} (slots {self.slots[worker]}) did not start "
                                  f"(exit code {process.exitcode})")
        kind, payload = receive(connection)
        if kind == "error":
            raise WorkerError(f"worker {process.pid} (slots {self.slots[worker]}) could not start: {payload}")
        self.pids[worker] = int(payload)

    def _start(self, worker: int, method: str, args: tuple[Any, ...]) -> None:
        connection = self.connections[worker]
        assert connection is not None
        try:
            send(connection, method, list(args))
        except (BrokenPipeError, OSError):  # a dead worker: its answer is the failure _answers reports
            pass

    def _answers(self, busy: list[int]) -> list[tuple[int, Any]]:
        by_connection = {self.connections[worker]: worker for worker in busy}
        ready = wait(list(by_connection), timeout=POLL_SECONDS) if by_connection else []
        answers = []
        for connection in ready:
            worker = by_connection[connection]  # type: ignore[index]
            try:
                kind, payload = receive(connection)  # type: ignore[arg-type]
            except (EOFError, OSError):
                answers.append((worker, self._death(worker)))
                continue
            answers.append((worker, WorkerFailure(worker, self.pids[worker], payload) if kind == "error" else payload))
        for worker in busy:  # a dead worker's pipe may stay open in a grandchild: ask the process
            if self.connections[worker] not in ready and not self.processes[worker].is_alive():
                answers.append((worker, self._death(worker)))
        return answers

    def _death(self, worker: int) -> WorkerFailure:
        process = self.processes[worker]
        process.join(timeout=1)
        return WorkerFailure(worker, self.pids[worker], f"died (exit code {process.exitcode})", replaced=True)

    def _stop(self, worker: int, grace_seconds: float) -> None:
        connection, process = self.connections[worker], self.processes[worker]
        if connection is not None:
            try:
                if grace_seconds and process.is_alive():
                    send(connection, "close", None)
                    if connection.poll(grace_seconds):
                        receive(connection)
            except (EOFError, OSError):  # a worker that already died has nothing to close
                pass
            connection.close()
        if process is not None:
            process.join(timeout=grace_seconds or 0.1)
            if process.is_alive():
                process.kill()
                process.join()

    def _replace(self, worker: int) -> None:
        self._stop(worker, 0.0)
        self._spawn(worker)
        self._hello(worker)

    def close(self) -> None:
        for worker in range(self.num_workers):
            self._stop(worker, 30.0)


class RemoteHost:
    """A Ray actor hosting one object."""

    def __init__(self, factory: HostFactory, slots: list[int]) -> None:
        self.host = factory(slots)

    def identity(self) -> tuple[int, str]:
        return os.getpid(), socket.gethostname()

    def call(self, method: str, args: tuple[Any, ...]) -> Any:
        return _call(self.host, method, args)

    def close(self) -> None:
        _close_host(self.host)


class RayPool(WorkerPool):
    """Ray actors spread over the cluster's nodes, one per worker; `regroup` moves them onto other
    nodes (nodes that joined the run, or fewer once some left) between two generations."""

    def __init__(self, factory: HostFactory, slots: list[list[int]], timeout_seconds: float | None,
                 ray_address: str | None) -> None:
        import ray

        from ..runtime.placement.ray_setup import ensure_ray

        super().__init__(slots, timeout_seconds)
        self.ray = ray
        self.started_ray = ensure_ray(ray_address, os.cpu_count() or 1)
        self.num_slots = sum(len(worker_slots) for worker_slots in slots)
        self.cpus_per_worker = min(1.0, ray.cluster_resources().get("CPU", 1.0) / len(slots))
        self.remote = ray.remote(max_restarts=0)(RemoteHost)
        self.factory_ref = ray.put(factory)  # shipped once, not with every replacement
        #: Where each worker runs: None (anywhere), or (Ray node id, soft: whether elsewhere when it is full).
        self.placements: list[tuple[str, bool] | None] = [None] * len(slots)
        self.actors: list[Any] = [self._new_actor(worker_slots, None) for worker_slots in slots]
        self.pending: dict[Any, int] = {}
        try:
            self._identify(range(len(slots)))
        except BaseException:
            self.close()
            raise

    def _new_actor(self, slots: list[int], placement: tuple[str, bool] | None) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        # SPREAD: on a multi-node cluster the workers run on every node, not first on the driver's.
        strategy = "SPREAD" if placement is None else NodeAffinitySchedulingStrategy(*placement)
        return self.remote.options(num_cpus=self.cpus_per_worker, scheduling_strategy=strategy).remote(
            self.factory_ref, slots)

    def regroup(self, placements: list[tuple[str, bool]]) -> list[int]:
        """One worker per placement (at most one per member where members live in the workers), their
        slots shared round robin; between two generations only. A worker whose slots and placement
        stay is kept; the others are closed and started anew, and the workers returned need their
        members' states restored (`workflow.restore_members`)."""
        count = min(len(placements), self.num_slots) if self.num_slots else len(placements)
        placements = placements[:count]
        slots = assign_slots(self.num_slots, count) if self.num_slots else [[] for _ in range(count)]
        kept = [worker < self.num_workers and self.slots[worker] == slots[worker]
                and self.placements[worker] == placements[worker] for worker in range(count)]
        ended = [actor for worker, actor in enumerate(self.actors) if worker >= count or not kept[worker]]
        try:
            self.ray.get([actor.close.remote() for actor in ended], timeout=30)
        except Exception:  # a worker whose node went has nothing to close
            pass
        for actor in ended:
            self.ray.kill(actor)
        renewed = [worker for worker in range(count) if not kept[worker]]
        self.actors = [self.actors[worker] if kept[worker] else self._new_actor(slots[worker], placements[worker])
                       for worker in range(count)]
        self.pids, self.host_names = self.pids[:count], self.host_names[:count]
        self.pids += [0] * (count - len(self.pids))
        self.host_names += [""] * (count - len(self.host_names))
        self.slots, self.placements = slots, list(placements)
        self._identify(renewed)
        return renewed

    def _identify(self, workers: Any) -> None:
        workers = list(workers)
        try:
            identities = self.ray.get([self.actors[worker].identity.remote() for worker in workers],
                                      timeout=START_TIMEOUT_SECONDS)
        except Exception as error:
            raise WorkerError(f"a Ray worker could not start its host: {error}") from None
        for worker, (pid, name) in zip(workers, identities):
            self.pids[worker], self.host_names[worker] = pid, name

    def _start(self, worker: int, method: str, args: tuple[Any, ...]) -> None:
        self.pending[self.actors[worker].call.remote(method, args)] = worker

    def _answers(self, busy: list[int]) -> list[tuple[int, Any]]:
        ray = self.ray
        references = [reference for reference, worker in self.pending.items() if worker in busy]
        if not references:
            return []
        ready, rest = ray.wait(references, num_returns=1, timeout=POLL_SECONDS)
        if ready and rest:
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        answers = []
        for reference in ready:
            worker = self.pending.pop(reference)
            try:
                answers.append((worker, ray.get(reference)))
            except ray.exceptions.RayActorError as error:
                answers.append((worker, WorkerFailure(worker, self.pids[worker], f"died: {error}", replaced=True)))
            except Exception as error:  # the hosted method raised
                cause = getattr(error, "cause", None) or error
                answers.append((worker, WorkerFailure(worker, self.pids[worker], f"{type(cause).__name__}: {cause}")))
        return answers

    def _replace(self, worker: int) -> None:
        for reference in [reference for reference, owner in self.pending.items() if owner == worker]:
            del self.pending[reference]
        self.ray.kill(self.actors[worker])
        # Anywhere: the node it had to run on may be the one that went.
        self.placements[worker] = None
        self.actors[worker] = self._new_actor(self.slots[worker], None)
        self._identify([worker])

    def close(self) -> None:
        try:
            self.ray.get([actor.close.remote() for actor in self.actors], timeout=30)
        except Exception:  # a worker that already died has nothing to close
            pass
        for actor in self.actors:
            self.ray.kill(actor)
        if self.started_ray:
            from ..runtime.placement.ray_setup import shutdown_ray

            shutdown_ray()


def make_pool(mode: str, factory: HostFactory, num_slots: int, num_workers: int | None,
              timeout_seconds: float | None, ray_address: str | None = None) -> WorkerPool:
    """The pool `runtime.mode` names: serial (this process), fork, or ray. Stateful populations
    (`num_slots` members) get at most one worker per member; stateless ones one per core by default."""
    if mode == "serial":
        return InProcessPool(factory, num_slots)
    count = num_workers or os.cpu_count() or 1
    if num_slots:
        count = min(count, num_slots)
    slots = assign_slots(num_slots, count) if num_slots else [[] for _ in range(count)]
    if mode == "fork":
        return ForkPool(factory, slots, timeout_seconds)
    if mode == "ray":
        return RayPool(factory, slots, timeout_seconds, ray_address)
    raise ValueError(f"unknown runtime.mode {mode!r} (allowed: serial, fork, ray)")
