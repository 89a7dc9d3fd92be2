"""Members of one process trained in lockstep learn as each would alone: replaying the batches each
member sampled through its own one-by-one updates gives the same weights and versions."""

from __future__ import annotations

import time

import torch

from lamarckian_hpc.config import PBTConfig, load_config
from lamarckian_hpc.evorl.lockstep import LockstepMembers
from lamarckian_hpc.evorl.member import Member

OVERRIDES = ["runtime.mode=serial", "ppo.num_epochs=3", "ppo.batch_size=256", "ppo.num_minibatches=4",
             "algorithm.population_size=3"]
HYPERPARAMETERS = [{"learning_rate": 1e-3, "value_weight": 0.5, "entropy_weight": 0.01},
                   {"learning_rate": 3e-4, "value_weight": 0.1, "entropy_weight": 0.001},
                   {"learning_rate": 3e-3, "value_weight": 1.0, "entropy_weight": 0.05}]


def _members(config: PBTConfig) -> list[Member]:
    members = [Member(config, slot) for slot in range(3)]
    for member, values in zip(members, HYPERPARAMETERS):
        member.set_hyperparameters(values)
    return members


def _record_sampling(members: list[Member]) -> dict[int, list]:
    """Each member's sampled batches and the env frames it updated at, as they are sampled."""
    sampled: dict[int, list] = {member.slot: [] for member in members}
    for member in members:
        def sample(result, member=member, sample=member.sample):
            experience = sample(result)
            sampled[member.slot].append((experience, member.env_frames))
            return experience
        member.sample = sample
    return sampled


def _assert_same_learner(ours: Member, theirs: Member) -> None:
    assert ours.learner.version == theirs.learner.version
    for (name, mine), other in zip(ours.learner.model.state_dict().items(), theirs.learner.model.state_dict().values()):
        torch.testing.assert_close(mine, other, atol=1e-5, rtol=1e-4, msg=name)
    moments = ours.learner.optimizer.state_dict()["state"]
    for index, slots in theirs.learner.optimizer.state_dict()["state"].items():
        torch.testing.assert_close(moments[index]["exp_avg"], slots["exp_avg"], atol=1e-6, rtol=1e-4)


def test_lockstep_members_learn_as_each_would_alone():
    config = load_config("configs/pbt_ppo_cartpole.yaml", OVERRIDES, PBTConfig)
    members, alone = _members(config), _members(config)  # same seeds: the same initial weights
    sampled = _record_sampling(members)
    try:
        results = LockstepMembers(members).train_interval(3 * 256, time.monotonic(), stop_on_target=False)
        assert [result.updates for result in results] == [3, 3, 3]
        for member, twin in zip(members, alone):
            for experience, frames in sampled[member.slot]:
                twin.learner.update(experience, frames)
            assert twin.learner.version == 3
            _assert_same_learner(member, twin)
        # The members learned apart: their own learning rates took them to different weights.
        first = [next(iter(member.learner.model.parameters())).detach() for member in members]
        assert not torch.allclose(first[0], first[1]) and not torch.allclose(first[0], first[2])
    finally:
        for member in members + alone:
            member.close()


def test_a_member_state_loaded_between_intervals_is_what_the_next_interval_trains():
    config = load_config("configs/pbt_ppo_cartpole.yaml", OVERRIDES, PBTConfig)
    members = _members(config)
    twin = Member(config, 1)
    try:
        lockstep = LockstepMembers(members)
        lockstep.train_interval(256, time.monotonic(), stop_on_target=False)
        copied = members[0].state()
        members[1].load_state(copied)  # an exploit: slot 1 becomes a copy of slot 0
        twin.set_hyperparameters(HYPERPARAMETERS[1])
        twin.load_state(copied)
        twin.learner.version = members[1].learner.version
        twin.learner.rng.bit_generator.state = members[1].learner.rng.bit_generator.state
        sampled = _record_sampling(members)
        lockstep.train_interval(256, time.monotonic(), stop_on_target=False)
        for experience, frames in sampled[1]:
            twin.learner.update(experience, frames)
        _assert_same_learner(members[1], twin)  # the stack trained the copy, not slot 1's old weights
    finally:
        for member in members + [twin]:
            member.close()
