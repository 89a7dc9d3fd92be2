"""Actor and relay processes on Ray: Ray places, starts and restarts them; ZeroMQ carries their data.

Each Ray actor runs an `ActorLoop` in a thread started by its constructor, so a restart (Ray runs
the constructor again in a new process) resumes sampling with no call from the learner. A loop
that fails ends its process, and Ray restarts it.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

import ray

from ...comm import LEARNER
from ...comm.relay import Relay, RelaySpec
from ...config import RunConfig
from ..actor.loop import ActorLoop
from .cpu_quota import join_cpu_group
from .ray_setup import ensure_ray, worker_runtime_env

log = logging.getLogger(__name__)

#: What Slurm sends every process of a job that ends: SIGTERM at scancel or preemption, USR2 as the
#: warning before its time limit (submitit's `--signal`).
LEAVE_SIGNALS = (signal.SIGTERM, signal.SIGUSR2)
#: How long a process of a leaving node may take to hand in what it holds before it exits.
LEAVE_GRACE_SECONDS = 3.0


def leave_on_signal(stop: Callable[[], None], wait: Callable[[float], None]) -> None:
    """On a leave signal, `stop` the process's work, give it up to LEAVE_GRACE_SECONDS (`wait`) to
    hand in what it holds, then exit: the processes of an actor job's node are all signalled at
    once, and an actor's last message and a relay's queue then still reach the learner, where
    dying at the signal would drop them. The raylet's own SIGKILL ends a process that hangs."""
    def on_signal(number: int, _frame: Any) -> None:
        def leave() -> None:
            stop()
            wait(LEAVE_GRACE_SECONDS)
            os._exit(0)

        threading.Thread(target=leave, name=f"leave-on-{signal.Signals(number).name}", daemon=True).start()

    for number in LEAVE_SIGNALS:
        try:
            signal.signal(number, on_signal)
        except ValueError:  # not the main thread: Ray's default handling stays
            log.warning("cannot handle %s here; the process ends at once when its node leaves", number)

class ActorProcess:
    def __init__(self, config_tree: dict[str, Any], actor_index: int, num_actors: int, weights_address: str,
                 experience_address: str, experience_server: str, graceful_leave: bool = False) -> None:
        """`graceful_leave`: a node of an actor job, which may leave while the run goes on; on its
        signal the actor finishes the message it is sampling and sends it before it exits."""
        join_cpu_group()  # a host's own cores where the test cluster gives it a quota; else nothing
        config = RunConfig.model_validate(config_tree)
        self.loop = ActorLoop(config, actor_index, num_actors, weights_address, experience_address,
                              experience_server=experience_server)
        self.thread = threading.Thread(target=self._run, name=f"actor-{actor_index}", daemon=True)
        self.thread.start()
        if graceful_leave:
            leave_on_signal(self.loop.stop_event.set, self.thread.join)

    def _run(self) -> None:
        try:
            self.loop.run()
        except BaseException:
            log.exception("actor loop failed; ending the process so that Ray restarts it")
            os._exit(1)

    def pid(self) -> int:
        return os.getpid()

    def node(self) -> str:
        """Where this actor runs: its host name and the address its node is reached at."""
        return f"{socket.gethostname()} ({ray.util.get_node_ip_address()})"

    def stop(self) -> None:
        self.loop.stop_event.set()
        self.thread.join(timeout=10)


class RelayProcess:
    """One node's relay of the weight tree (`comm.relay`), forwarding in a thread of its own process.

    Ray restarts a dead relay with the same spec: it binds the same IPC endpoint, so the node's
    actors reconnect to it by themselves, and it subscribes to its parent again.
    """

    def __init__(self, spec: dict[str, Any], graceful_leave: bool = False) -> None:
        """`graceful_leave`: on its node's leave signal, the relay forwards what comes up for the
        grace time, then exits."""
        if not spec["host"]:  # a real node: listen on the address other nodes reach it by
            spec = {**spec, "host": ray.util.get_node_ip_address()}
        self.relay = Relay(RelaySpec(**spec))
        self.thread = threading.Thread(target=self._run, name=f"relay-{spec['node']}", daemon=True)
        self.thread.start()
        if graceful_leave:
            leave_on_signal(lambda: None, time.sleep)

    def _run(self) -> None:
        try:
            self.relay.run()
        except BaseException:
            log.exception("relay failed; ending the process so that Ray restarts it")
            os._exit(1)

    def address(self) -> str:
        return self.relay.address

    def addresses(self) -> tuple[str, str | None]:
        """Its TCP addresses: weights publisher, experience receiver."""
        return self.relay.address, self.relay.experience_address

    def pid(self) -> int:
        return os.getpid()

    def stats(self) -> dict[str, Any]:
        return asdict(self.relay.stats)


def start_relay(spec: RelaySpec, scheduling: Any = None, graceful_leave: bool = False) -> Any:
    """A relay actor; it takes no CPU slot (it mostly waits), pinned to its node when given one."""
    options: dict[str, Any] = {"num_cpus": 0, "max_restarts": -1, "max_task_retries": 0,
                               "runtime_env": worker_runtime_env()}
    if scheduling is not None:
        options["scheduling_strategy"] = scheduling
    return ray.remote(RelayProcess).options(**options).remote(spec.to_dict(), graceful_leave)


def start_actors(config: RunConfig, num_actors: int, weights_address: str | Sequence[str],
                 experience_address: str | Sequence[str], scheduling: Callable[[int], Any] | None = None,
                 experience_servers: Sequence[str] | None = None, first_index: int = 0,
                 shape_actors: int | None = None, graceful_leave: bool = False) -> list[Any]:
    """`num_actors` actor processes, indexed from `first_index`; each address is one for all or one
    per actor, `experience_servers[i]` the key role of whoever listens at actor i's experience
    address (the learner by default), `scheduling(i)` pins actor i. Each sizes its messages and
    credits for `shape_actors` actors in the run (default `num_actors`): actors that join a running
    run size them as the run's own do."""
    remote = ray.remote(ActorProcess)
    options: dict[str, Any] = {
        "num_cpus": min(1.0, ray.cluster_resources().get("CPU", 1.0) / num_actors),  # oversubscribe if asked to
        "max_restarts": -1,
        "max_task_retries": 0,
        "runtime_env": worker_runtime_env(),
    }
    tree = config.to_json_dict()
    addresses = [weights_address] * num_actors if isinstance(weights_address, str) else list(weights_address)
    experience = ([experience_address] * num_actors if isinstance(experience_address, str)
                  else list(experience_address))
    servers = list(experience_servers) if experience_servers is not None else [LEARNER] * num_actors
    actors = []
    for offset in range(num_actors):
        strategy = scheduling(offset) if scheduling is not None else None
        # Without a node to pin it to, SPREAD: on a multi-node cluster the actors sample on every node.
        placed = remote.options(**options, scheduling_strategy=strategy if strategy is not None else "SPREAD")
        actors.append(placed.remote(tree, first_index + offset, shape_actors or num_actors, addresses[offset],
                                    experience[offset], servers[offset], graceful_leave))
    return actors


def init_ray(config: RunConfig, num_cpus: int) -> bool:
    """Join `runtime.ray_address`, or start a local Ray with `num_cpus`; True when we started it."""
    return ensure_ray(config.runtime.ray_address, num_cpus)
