"""Members on worker processes forked from the driver, talking over pipes in the wire format.

A Ray worker starts as a fresh interpreter: on a small machine, starting Ray and importing torch
and this package again in every worker costs several seconds before the first member exists,
which is a large part of a run that reaches its target in a minute. A forked worker starts with
everything the driver already imported, in milliseconds, and still trains its members in parallel
with the others. Requests and replies are `comm.wire` messages (a msgpack header and raw array
frames) over a `multiprocessing` pipe: nothing is pickled, nothing but plain data is read back.

The pool has the interface of `hosts.RayHosts` (one `MemberHost` per worker, round-robin slots),
for one machine only; a run across machines uses Ray.
"""

from __future__ import annotations

import dataclasses
import gc
import multiprocessing
import os
import signal
import socket
import time
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from ..comm.wire import Message, decode, encode
from ..config import PBTConfig
from .hosts import MemberHost, assign_slots
from .member import IntervalResult

_BIG_INT = "__int__"  # msgpack carries 64-bit ints; a generator's 128-bit state goes as a string
_ARRAY = "__array__"  # a placeholder in the header for the array frame of this name


def _flatten(value: Any, arrays: dict[str, np.ndarray]) -> Any:
    """`value` as msgpack-plain data; numpy arrays move to `arrays` and leave a named placeholder."""
    if isinstance(value, np.ndarray):
        name = str(len(arrays))
        arrays[name] = value
        return {_ARRAY: name}
    if isinstance(value, dict):
        return {str(key): _flatten(item, arrays) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_flatten(item, arrays) for item in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        number = int(value)
        return number if -(1 << 63) <= number < (1 << 64) else {_BIG_INT: str(number)}
    if isinstance(value, np.floating):
        return float(value)
    return value


def _unflatten(value: Any, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(value, dict):
        if set(value) == {_ARRAY}:
            return np.array(arrays[value[_ARRAY]])  # a writable copy of the received view
        if set(value) == {_BIG_INT}:
            return int(value[_BIG_INT])
        return {key: _unflatten(item, arrays) for key, item in value.items()}
    if isinstance(value, list):
        return [_unflatten(item, arrays) for item in value]
    return value


def _send(connection: Connection, kind: str, payload: Any) -> None:
    arrays: dict[str, np.ndarray] = {}
    meta = {"payload": _flatten(payload, arrays)}
    frames = encode(Message(kind, str(os.getpid()), 0, arrays, meta))
    connection.send_bytes(len(frames).to_bytes(4, "little"))
    for frame in frames:
        connection.send_bytes(frame)


def _receive(connection: Connection) -> tuple[str, Any]:
    count = int.from_bytes(connection.recv_bytes(), "little")
    message = decode([connection.recv_bytes() for _ in range(count)])
    return message.kind, _unflatten(message.meta.get("payload"), message.arrays)


def _serve(config: PBTConfig, slots: list[int], connection: Connection) -> None:
    """A worker: build the members, then answer requests until `close` (or the driver is gone).
    Ctrl-C is the driver's to handle: it closes the workers."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        host = MemberHost(config, slots)
    except Exception as error:  # the driver raises it with the worker's message
        _send(connection, "error", f"{type(error).__name__}: {error}")
        return
    _send(connection, "ok", os.getpid())
    while True:
        try:
            kind, arguments = _receive(connection)
        except (EOFError, OSError):
            host.close()
            return
        try:
            if kind == "close":
                host.close()
                _send(connection, "ok", None)
                return
            if kind == "train_interval":
                answer: Any = [dataclasses.asdict(result) for result in host.train_interval(*arguments)]
            elif kind in ("set_hyperparameters", "state", "load_state", "checkpoint", "restore"):
                answer = getattr(host, kind)(*arguments)
            else:
                raise ValueError(f"unknown request {kind!r}")
            _send(connection, "ok", answer)
        except Exception as error:
            _send(connection, "error", f"{type(error).__name__}: {error}")


class ForkHosts:
    """`num_workers` forked processes, each a MemberHost; intervals run on all of them at once."""

    def __init__(self, config: PBTConfig) -> None:
        context = multiprocessing.get_context("fork")
        self.reply_timeout_seconds = config.runtime.reply_timeout_seconds
        population_size = config.algorithm.population_size
        num_workers = min(population_size, config.runtime.num_workers or os.cpu_count() or 1)
        self.slots = assign_slots(population_size, num_workers)
        self.connections: list[Connection] = []
        self.processes = []
        # What the driver imported moves out of the collector's reach before the forks: a worker's
        # collections then neither walk those objects again nor copy their pages by touching them.
        gc.freeze()
        try:
            for slots in self.slots:
                parent_end, child_end = context.Pipe(duplex=True)
                process = context.Process(target=_serve, args=(config, slots, child_end), daemon=True)
                process.start()
                child_end.close()
                self.connections.append(parent_end)
                self.processes.append(process)
        finally:
            gc.unfreeze()
        self.host_of = {slot: host for host, slots in enumerate(self.slots) for slot in slots}
        try:
            pids = self._gather([self._ask(host, "pid", None) for host in range(num_workers)])
        except BaseException:
            self.close()
            raise
        self.workers = {slot: pid for pid, slots in zip(pids, self.slots) for slot in slots}
        self.worker_hosts = {slot: socket.gethostname() for slot in self.workers}  # forked here

    def _ask(self, host: int, kind: str, arguments: Any) -> int:
        """Send a request (the first answer, `pid`, is sent by the worker unasked); returns `host`."""
        if kind != "pid":
            _send(self.connections[host], kind, arguments)
        return host

    def _gather(self, hosts: list[int]) -> list[Any]:
        """The answers of `hosts`, in order; a worker's error is raised here."""
        answers = []
        for host in hosts:
            self._wait_for_answer(host)
            try:
                kind, payload = _receive(self.connections[host])
            except (EOFError, OSError):
                raise RuntimeError(f"PBT worker {self.processes[host].pid} (slots {self.slots[host]}) died") from None
            if kind == "error":
                raise RuntimeError(f"PBT worker {self.processes[host].pid} (slots {self.slots[host]}): {payload}")
            answers.append(payload)
        return answers

    def _wait_for_answer(self, host: int) -> None:
        """Until `host` answers: a worker that died is reported at once (its pipe may stay open
        in a grandchild), one that stays silent past runtime.reply_timeout_seconds is taken for
        hung, so that one stuck worker cannot hang the driver."""
        deadline = time.monotonic() + self.reply_timeout_seconds
        process = self.processes[host]
        while not self.connections[host].poll(1.0):
            if not process.is_alive():
                raise RuntimeError(f"PBT worker {process.pid} (slots {self.slots[host]}) died "
                                   f"(exit code {process.exitcode})")
            if time.monotonic() > deadline:
                raise RuntimeError(f"PBT worker {process.pid} (slots {self.slots[host]}) sent no answer within "
                                   f"{self.reply_timeout_seconds:g} s (runtime.reply_timeout_seconds)")

    def train_interval(self, frames: int, stop_on_target: bool, deadline_seconds: float | None) -> list[IntervalResult]:
        arguments = [frames, stop_on_target, deadline_seconds]
        batches = self._gather([self._ask(host, "train_interval", arguments) for host in range(len(self.slots))])
        results = [IntervalResult(**fields) for batch in batches for fields in batch]
        return sorted(results, key=lambda result: result.slot)

    def set_hyperparameters(self, values: list[dict[str, float]]) -> None:
        self._gather([self._ask(self.host_of[slot], "set_hyperparameters", [slot, slot_values])
                      for slot, slot_values in enumerate(values)])

    def copy(self, sources: np.ndarray) -> None:
        """All sources are read before any slot is overwritten (a slot may be both)."""
        wanted = sorted({int(source) for source in sources if source >= 0})
        states = dict(zip(wanted, self._gather([self._ask(self.host_of[s], "state", [s]) for s in wanted])))
        self._gather([self._ask(self.host_of[slot], "load_state", [slot, states[int(source)]])
                      for slot, source in enumerate(sources) if source >= 0])

    def checkpoints(self) -> list[dict]:
        return self._gather([self._ask(self.host_of[slot], "checkpoint", [slot]) for slot in sorted(self.host_of)])

    def restore(self, states: list[dict]) -> None:
        self._gather([self._ask(self.host_of[slot], "restore", [slot, state]) for slot, state in enumerate(states)])

    def close(self) -> None:
        for connection, process in zip(self.connections, self.processes):
            try:
                _send(connection, "close", None)
                if connection.poll(30):
                    _receive(connection)
            except (EOFError, OSError):  # a worker that already died has nothing to close
                pass
            connection.close()
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
                process.join()
