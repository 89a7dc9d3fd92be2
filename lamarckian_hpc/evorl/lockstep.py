"""The members of one worker process trained update by update together, their PPO updates one
batched step over their stacked parameters (`rl/batched_ppo.py`).

A worker that hosts several members used to train them one after another, a whole interval each.
For the small networks PBT trains on the CPU a PPO update is mostly per-operation overhead, so
updating the members together costs little more than updating one: each round, every member
samples its batch with its own policy, then one batched step updates them all. Learning per member
is what training alone gives (each keeps its learning rate, loss weights, clipping, minibatch
order and Adam state; tests/test_batched_ppo.py compares the two within float tolerance); what
changes is only the order in which the members sample, so a run is reproducible for a layout but
not bitwise equal to the one-by-one loop.

Members update together while their batches have one shape; a round in which they differ (a
member that finished its interval early, a batch of another size) updates the members one by one.
"""

from __future__ import annotations

import time

from ..rl import ppo_update
from ..rl.batched_ppo import BatchedPPO
from .member import IntervalResult, Member


class LockstepMembers:
    def __init__(self, members: list[Member]) -> None:
        self.members = members
        self.batched = BatchedPPO([member.learner.model for member in members],
                                  [member.learner.optimizer for member in members],
                                  [member.run_config.algorithm for member in members])

    def train_interval(self, frames: int, clock_start: float, stop_on_target: bool,
                       deadline: float | None = None) -> list[IntervalResult]:
        """`Member.train_interval` for every member at once: each trains until it sampled `frames`
        more env frames; with `stop_on_target` all stop once one reaches the target."""
        start = time.monotonic()
        results = [IntervalResult(member.slot, float("nan")) for member in self.members]
        ends = [member.env_frames + frames for member in self.members]
        self.batched.load_members()  # copies, restores and loads since the last interval
        while True:
            active = [index for index, member in enumerate(self.members) if member.env_frames < ends[index]]
            if not active:
                break
            reached = self._round(active, results, clock_start)
            if (reached and stop_on_target) or (deadline is not None and time.monotonic() >= deadline):
                break
        return [member.finish(result, start) for member, result in zip(self.members, results)]

    def _round(self, active: list[int], results: list[IntervalResult], clock_start: float) -> bool:
        """Sample a batch with each active member and update them; True when one reached the target."""
        members = [self.members[index] for index in active]
        experiences = [member.sample(results[index]) for index, member in zip(active, members)]
        prepared = [member.learner.ppo_batch(experience, member.env_frames)
                    for member, experience in zip(members, experiences)]
        together = len(active) == len(self.members) and len({len(batch) for batch, _ in prepared}) == 1
        if together:
            diagnostics = self.batched.update([batch for batch, _ in prepared],
                                              [member.learner.rng for member in members],
                                              [member.run_config.algorithm for member in members])
            self.batched.write_back()
            for member, experience, (_, learning_rate), member_diagnostics in zip(members, experiences, prepared,
                                                                                   diagnostics):
                member.learner.updated(experience, member_diagnostics, learning_rate)
        else:
            for member, experience, (batch, learning_rate) in zip(members, experiences, prepared):
                learner = member.learner
                member_diagnostics = ppo_update(learner.model, learner.optimizer, batch, member.run_config.algorithm,
                                                learner.rng)
                learner.updated(experience, member_diagnostics, learning_rate)
            self.batched.load_members()
        return any([member.updated(results[index], clock_start) for index, member in zip(active, members)])
