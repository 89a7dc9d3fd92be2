"""The members of a PBT population that one worker process trains (`population.worker_pool` hosts
one `WorkerMembers` per worker: in the driver's process, forked, or a Ray actor on any node).

Its methods take and return plain data (numbers, dicts, numpy arrays, no torch objects), so that
an exploit moves a member's arrays from one worker to another over a pipe or through Ray's object
store without pickling torch.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import torch

from ..config import PBTConfig
from ..population.workflow import HostedMembers
from .lockstep import LockstepMembers
from .member import Member


class WorkerMembers(HostedMembers):
    """Members `slots` of the population: trained together, their updates one batched step
    (`lockstep`), or with `runtime.batched_updates: false` one after another."""

    def __init__(self, config: PBTConfig, slots: list[int]) -> None:
        torch.set_num_threads(config.runtime.torch_threads)
        self.members = {slot: Member(config, slot) for slot in slots}
        together = config.runtime.batched_updates and len(self.members) > 1
        self.lockstep = LockstepMembers(list(self.members.values())) if together else None

    def train_interval(self, frames: int, stop_on_target: bool, deadline_seconds: float | None) -> list[dict]:
        """One interval for each member (`member.IntervalResult` fields); with `stop_on_target` the
        others are skipped once one member reaches the target (the run is about to stop)."""
        clock_start = time.monotonic()
        deadline = None if deadline_seconds is None else clock_start + deadline_seconds
        if self.lockstep is not None:
            results = self.lockstep.train_interval(frames, clock_start, stop_on_target, deadline)
        else:
            results = []
            for member in self.members.values():
                # Once one member reached the target the run stops: the rest only report where they are.
                skip = stop_on_target and any(r.reached_seconds is not None for r in results)
                results.append(member.train_interval(0 if skip else frames, clock_start, stop_on_target, deadline))
        return [dataclasses.asdict(result) for result in results]

    def set_hyperparameters(self, slot: int, values: dict[str, float]) -> None:
        self.members[slot].set_hyperparameters(values)

    def state(self, slot: int) -> dict[str, np.ndarray]:
        return self.members[slot].state()

    def load_state(self, slot: int, arrays: dict[str, np.ndarray]) -> None:
        self.members[slot].load_state(arrays)

