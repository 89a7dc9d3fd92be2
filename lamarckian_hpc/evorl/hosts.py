"""Where the members of a population live: one or more processes, each stepping its members.

A `MemberHost` owns some members and trains each of them one interval per call. The serial pool
keeps one host in this process; the Ray pool runs `runtime.num_workers` hosts as Ray actors, so
members train in parallel, and an exploit moves a member's arrays from one actor to another
through Ray's object store (numpy arrays, no torch objects). The driver in `pbt_ppo` sees the same
interface either way.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Protocol

import numpy as np
import torch

from ..config import PBTConfig
from .lockstep import LockstepMembers
from .member import IntervalResult, Member


class MemberHost:
    """Members `slots` of the population in this process: trained together, their updates one
    batched step (`lockstep`), or with `runtime.batched_updates: false` one after another."""

    def __init__(self, config: PBTConfig, slots: list[int]) -> None:
        torch.set_num_threads(config.runtime.torch_threads)
        self.members = {slot: Member(config, slot) for slot in slots}
        together = config.runtime.batched_updates and len(self.members) > 1
        self.lockstep = LockstepMembers(list(self.members.values())) if together else None

    def pid(self) -> int:
        return os.getpid()

    def host(self) -> str:
        return socket.gethostname()

    def train_interval(self, frames: int, stop_on_target: bool, deadline_seconds: float | None) -> list[IntervalResult]:
        """One interval for each member; with `stop_on_target` the others are skipped once one
        member reaches the target (the run is about to stop)."""
        clock_start = time.monotonic()
        deadline = None if deadline_seconds is None else clock_start + deadline_seconds
        if self.lockstep is not None:
            return self.lockstep.train_interval(frames, clock_start, stop_on_target, deadline)
        results = []
        for member in self.members.values():
            # Once one member reached the target the run stops: the rest only report where they are.
            skip = stop_on_target and any(r.reached_seconds is not None for r in results)
            results.append(member.train_interval(0 if skip else frames, clock_start, stop_on_target, deadline))
        return results

    def set_hyperparameters(self, slot: int, values: dict[str, float]) -> None:
        self.members[slot].set_hyperparameters(values)

    def state(self, slot: int) -> dict[str, np.ndarray]:
        return self.members[slot].state()

    def load_state(self, slot: int, arrays: dict[str, np.ndarray]) -> None:
        self.members[slot].load_state(arrays)

    def checkpoint(self, slot: int) -> dict:
        return self.members[slot].checkpoint()

    def restore(self, slot: int, state: dict) -> None:
        self.members[slot].restore(state)

    def close(self) -> None:
        for member in self.members.values():
            member.close()


def assign_slots(population_size: int, num_hosts: int) -> list[list[int]]:
    """Round robin: host h gets slots h, h + num_hosts, ..."""
    return [list(range(host, population_size, num_hosts)) for host in range(num_hosts)]


class HostPool(Protocol):
    workers: dict[int, int]  # slot -> pid of the process that trains it
    worker_hosts: dict[int, str]  # slot -> name of the host that process runs on

    def train_interval(self, frames: int, stop_on_target: bool, deadline_seconds: float | None
                       ) -> list[IntervalResult]: ...

    def set_hyperparameters(self, values: list[dict[str, float]]) -> None: ...

    def copy(self, sources: np.ndarray) -> None: ...

    def checkpoints(self) -> list[dict]: ...  # per slot, Member.checkpoint()

    def restore(self, states: list[dict]) -> None: ...

    def close(self) -> None: ...


class SerialHosts:
    """Every member in this process: one host stepping the whole population."""

    def __init__(self, config: PBTConfig) -> None:
        self.host = MemberHost(config, list(range(config.algorithm.population_size)))
        self.workers = {slot: os.getpid() for slot in self.host.members}
        self.worker_hosts = {slot: socket.gethostname() for slot in self.host.members}

    def train_interval(self, frames: int, stop_on_target: bool, deadline_seconds: float | None) -> list[IntervalResult]:
        return self.host.train_interval(frames, stop_on_target, deadline_seconds)

    def set_hyperparameters(self, values: list[dict[str, float]]) -> None:
        for slot, slot_values in enumerate(values):
            self.host.set_hyperparameters(slot, slot_values)

    def copy(self, sources: np.ndarray) -> None:
        states = {int(source): self.host.state(int(source)) for source in sources if source >= 0}
        for slot, source in enumerate(sources):
            if source >= 0:
                self.host.load_state(slot, states[int(source)])

    def checkpoints(self) -> list[dict]:
        return [self.host.checkpoint(slot) for slot in sorted(self.host.members)]

    def restore(self, states: list[dict]) -> None:
        for slot, state in enumerate(states):
            self.host.restore(slot, state)

    def close(self) -> None:
        self.host.close()


class RayHosts:
    """`num_workers` Ray actors, each a MemberHost; intervals run on all of them at once."""

    def __init__(self, config: PBTConfig) -> None:
        import ray

        from ..runtime.ray_setup import ensure_ray

        self.ray = ray
        self.started_ray = ensure_ray(config.runtime.ray_address, os.cpu_count() or 1)
        population_size = config.algorithm.population_size
        num_workers = min(population_size, config.runtime.num_workers or os.cpu_count() or 1)
        cpus = ray.cluster_resources().get("CPU", 1.0)
        per_worker = min(1.0, cpus / num_workers)
        # The host sets its torch threads itself; a runtime_env would add an environment agent's start-up.
        # SPREAD: on a multi-node cluster the members train on every node, not first on the driver's.
        remote = ray.remote(num_cpus=per_worker, scheduling_strategy="SPREAD")(MemberHost)
        self.slots = assign_slots(population_size, num_workers)
        self.hosts = [remote.remote(config, slots) for slots in self.slots]
        self.host_of = {slot: host for host, slots in zip(self.hosts, self.slots) for slot in slots}
        pids = ray.get([host.pid.remote() for host in self.hosts])
        self.workers = {slot: pid for pid, slots in zip(pids, self.slots) for slot in slots}
        names = ray.get([host.host.remote() for host in self.hosts])
        self.worker_hosts = {slot: name for name, slots in zip(names, self.slots) for slot in slots}

    def train_interval(self, frames: int, stop_on_target: bool, deadline_seconds: float | None) -> list[IntervalResult]:
        batches = self.ray.get([host.train_interval.remote(frames, stop_on_target, deadline_seconds)
                                for host in self.hosts])
        return sorted((result for batch in batches for result in batch), key=lambda result: result.slot)

    def set_hyperparameters(self, values: list[dict[str, float]]) -> None:
        self.ray.get([self.host_of[slot].set_hyperparameters.remote(slot, slot_values)
                      for slot, slot_values in enumerate(values)])

    def copy(self, sources: np.ndarray) -> None:
        """All sources are read before any slot is overwritten (a slot may be both)."""
        states = {int(source): self.host_of[int(source)].state.remote(int(source))
                  for source in sources if source >= 0}
        if not states:
            return
        self.ray.wait(list(states.values()), num_returns=len(states))
        self.ray.get([self.host_of[slot].load_state.remote(slot, states[int(source)])
                      for slot, source in enumerate(sources) if source >= 0])

    def checkpoints(self) -> list[dict]:
        return self.ray.get([self.host_of[slot].checkpoint.remote(slot) for slot in sorted(self.host_of)])

    def restore(self, states: list[dict]) -> None:
        self.ray.get([self.host_of[slot].restore.remote(slot, state) for slot, state in enumerate(states)])

    def close(self) -> None:
        try:
            self.ray.get([host.close.remote() for host in self.hosts], timeout=30)
        except Exception:  # a host that already died has nothing to close
            pass
        for host in self.hosts:
            self.ray.kill(host)
        if self.started_ray:
            from ..runtime.ray_setup import shutdown_ray

            shutdown_ray()
