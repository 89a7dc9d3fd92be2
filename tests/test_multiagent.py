"""Multi-agent training: agents bound to policies for their lifetime as they join and leave, one
batched inference per policy per tick across MDPs, frozen policies never updated, shared layers,
two policies learning from one sampler, and PettingZoo parallel environments through the adapter."""

from __future__ import annotations

from collections import defaultdict

import gymnasium as gym
import numpy as np
import pytest
import torch
from pettingzoo import ParallelEnv
from pettingzoo.classic import rps_v2

from lamarckian_hpc.config import ModelConfig, MultiAgentConfig, PPOConfig
from lamarckian_hpc.mdp import PolicyOutput, Sampler
from lamarckian_hpc.multiagent import (
    ParallelEnvMDP,
    PolicyMapping,
    build_policy_models,
    fixed_mapping,
    one_hot,
    policy_layers,
    random_mapping,
    round_robin_mapping,
)
from lamarckian_hpc.runtime.runners.multiagent_trainer import MultiAgentTrainer


class Crowd(ParallelEnv):
    """Agents `a<k>` live from tick join[k] to tick leave[k] of an episode of `length` ticks.

    Even agents end by termination at their leave tick, odd ones simply vanish from `agents` (the
    adapter must truncate them). An observation is [offset + k, tick / length, 1]; the reward is 1 when
    an even agent plays action 0 or an odd agent plays action 2, so two policies bound by parity
    have opposite things to learn.
    """

    metadata = {"name": "crowd_v0"}

    def __init__(self, join: list[int], leave: list[int], length: int, offset: int = 0) -> None:
        self.join, self.leave, self.length, self.offset = join, leave, length, offset
        self.possible_agents = [f"a{k}" for k in range(len(join))]
        self.agents: list[str] = []
        self.clock = 0

    def observation_space(self, agent):
        return gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)

    def action_space(self, agent):
        return gym.spaces.Discrete(3)

    def _obs(self, agent):
        return np.array([self.offset + int(agent[1:]), self.clock / self.length, 1.0], dtype=np.float32)

    def _present(self):
        return [a for k, a in enumerate(self.possible_agents) if self.join[k] <= self.clock < self.leave[k]]

    def reset(self, seed=None, options=None):
        self.clock = 0
        self.agents = self._present()
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        assert set(actions) == set(self.agents), (sorted(actions), self.agents)
        self.clock += 1
        rewards = {a: float(actions[a] == (0 if int(a[1:]) % 2 == 0 else 2)) for a in actions}
        terminations = {a: int(a[1:]) % 2 == 0 and self.clock >= self.leave[int(a[1:])] for a in actions}
        truncations = {a: self.clock >= self.length for a in actions}
        self.agents = [a for a in self._present() if not terminations.get(a)] if self.clock < self.length else []
        observations = {a: self._obs(a) for a in set(actions) | set(self.agents)}
        return observations, rewards, terminations, truncations, {a: {} for a in actions}


class Recorder:
    """A policy that records the agent codes of every batch it answers."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []

    def __call__(self, observations: np.ndarray) -> PolicyOutput:
        self.batches.append(observations[:, 0].astype(int).tolist())
        return PolicyOutput(np.zeros(len(observations), dtype=np.int64), np.zeros(len(observations), np.float32))


def test_agents_join_and_leave_and_keep_their_policy_for_their_lifetime():
    join, leave = [0, 0, 3, 5, 5, 9, 2, 7], [6, 12, 8, 20, 11, 20, 4, 15]
    mdps = [ParallelEnvMDP(Crowd(join, leave, length=20, offset=100 * e)) for e in range(3)]
    policies = {pid: Recorder() for pid in ("p0", "p1", "p2", "p3")}
    mapping = PolicyMapping(random_mapping(list(policies), seed=3), policies, (), {})
    sampler = Sampler(mdps, mapping, policies, seed=0)
    rows = 0
    for _tick in range(60):
        bound = dict(mapping.bindings)  # agents that join during this tick are bound after its inference
        before = {pid: len(p.batches) for pid, p in policies.items()}
        sampler.tick()
        live = sorted((e, a) for e, mdp in enumerate(mdps) for a in mdp.agent_ids())
        for pid, recorder in policies.items():
            new_batches = recorder.batches[before[pid]:]
            assert len(new_batches) <= 1  # one inference per policy per tick, over all MDPs
            for batch in new_batches:
                rows += len(batch)
                for code in batch:  # each row belongs to an agent bound to this policy
                    assert bound[(code // 100, f"a{code % 100}")] == pid
        assert all((e, a) in mapping.bindings for e, a in live)
    # Every live agent-tick was answered once: agent k is present for leave-join ticks per episode.
    assert rows == sum(leave[k] - join[k] for k in range(8)) * 3 * 3
    # 8 lifetimes per episode, 3 episodes per MDP in 60 ticks, plus the 2 agents of the 4th episode
    # that are present at its start (the reset costs no tick).
    assert sum(mapping.counts.values()) == (8 * 3 + 2) * 3
    assert len(mapping.counts) == 4


def test_binding_is_made_once_per_lifetime_even_if_the_mapping_changes_its_mind():
    answers = iter(["p0", "p1"] * 1000)
    seen: dict[str, set[str]] = defaultdict(set)

    class Tagging:
        def __init__(self, pid):
            self.pid = pid

        def __call__(self, observations):
            for code in observations[:, 0].astype(int):
                seen[f"a{code}"].add(self.pid)
            return PolicyOutput(np.zeros(len(observations), np.int64), np.zeros(len(observations), np.float32))

    join, leave = [0, 0, 0], [30, 30, 30]
    mdp = ParallelEnvMDP(Crowd(join, leave, length=30))
    mapping = PolicyMapping(lambda agent, env: next(answers), ["p0", "p1"], (), {})
    sampler = Sampler([mdp], mapping, {"p0": Tagging("p0"), "p1": Tagging("p1")})
    for _ in range(29):
        sampler.tick()
    assert all(len(pids) == 1 for pids in seen.values()) and len(seen) == 3
    assert [mapping.bindings[(0, a)] for a in ("a0", "a1", "a2")] == ["p0", "p1", "p0"]


def test_mapping_to_an_unknown_policy_is_a_clear_error():
    mdp = ParallelEnvMDP(Crowd([0], [5], length=5))
    with pytest.raises(KeyError, match="known policies"):
        Sampler([mdp], PolicyMapping(lambda a, e: "nobody", ["p0"], (), {}), {"p0": Recorder()})
    with pytest.raises(ValueError, match="policies_to_train"):
        MultiAgentConfig(policies=("a",), policies_to_train=("b",))


def test_built_in_mapping_functions():
    round_robin = round_robin_mapping(["a", "b", "c"])
    assert [round_robin(k, 0) for k in range(5)] == ["a", "b", "c", "a", "b"]
    first, second = random_mapping(["a", "b"], seed=4), random_mapping(["a", "b"], seed=4)
    drawn = [first(k, 0) for k in range(50)]
    assert drawn == [second(k, 0) for k in range(50)] and set(drawn) == {"a", "b"}  # seeded
    table = fixed_mapping({"left": "main"})
    assert table("left", 3) == "main"
    with pytest.raises(KeyError, match="no policy in the mapping table"):
        table("right", 0)


def test_shared_layers_must_exist_in_the_model():
    space = gym.spaces.Box(-1, 1, (3,), np.float32)
    with pytest.raises(ValueError, match="multiagent.shared_layers: 3 exceeds the 2 layers"):
        build_policy_models(["a", "b"], ["a", "b"], space, gym.spaces.Discrete(2),
                            ModelConfig(policy_hidden_sizes=(8, 8)), shared_layers=3)


def _trainer(policies, trained, shared_layers=0, mapping=None, steps=256, seed=0):
    config = MultiAgentConfig(policies=policies, policies_to_train=trained, shared_layers=shared_layers)
    ppo = PPOConfig(batch_size=steps, num_minibatches=2, num_epochs=4, learning_rate=3e-3, entropy_weight=0.0)
    model = ModelConfig(policy_hidden_sizes=(16, 16), critic_hidden_sizes=(16,))
    def crowd() -> ParallelEnvMDP:
        return ParallelEnvMDP(Crowd([0, 0, 1, 2, 4, 4], [10, 16, 16, 12, 16, 9], length=16))

    return MultiAgentTrainer([crowd() for _ in range(4)], config, ppo, model, seed=seed, mapping_fn=mapping)


def test_frozen_policies_are_never_updated_and_trained_ones_share_layers():
    torch.set_num_threads(1)
    trainer = _trainer(("a", "b", "frozen"), ("a", "b"), shared_layers=1)
    frozen_before = {k: v.clone() for k, v in trainer.models["frozen"].state_dict().items()}
    a_before = {k: v.clone() for k, v in trainer.models["a"].state_dict().items()}
    trainer.train(total_env_steps=800)
    assert trainer.updates["a"] >= 2 and trainer.updates["b"] >= 2
    assert trainer.mapping.counts["frozen"] > 0  # it did play
    for name, tensor in trainer.models["frozen"].state_dict().items():
        assert torch.equal(tensor, frozen_before[name]), name
    assert any(not torch.equal(t, a_before[n]) for n, t in trainer.models["a"].state_dict().items())
    layers = {pid: policy_layers(m) for pid, m in trainer.models.items()}
    assert layers["a"][0] is layers["b"][0] and layers["a"][2] is not layers["b"][2]
    assert layers["frozen"][0] is not layers["a"][0]
    assert trainer.sampler.policy_versions["frozen"] == 0 and trainer.sampler.policy_versions["a"] >= 2
    trainer.close()


def test_two_policies_learn_opposite_actions_from_one_sampler():
    torch.set_num_threads(1)
    parity = {f"a{k}": ("even" if k % 2 == 0 else "odd") for k in range(6)}
    trainer = _trainer(("even", "odd"), None, mapping=fixed_mapping(parity), seed=1)
    trainer.train(total_env_steps=1200)
    probe = torch.tensor([[0.0, 0.5, 1.0], [1.0, 0.5, 1.0]])
    with torch.no_grad():
        even = torch.softmax(trainer.models["even"].head.logits(trainer.models["even"].trunk(probe)), -1)
        odd = torch.softmax(trainer.models["odd"].head.logits(trainer.models["odd"].trunk(probe)), -1)
    assert even[0, 0] > 0.8, even
    assert odd[1, 2] > 0.8, odd
    trainer.close()


def test_pettingzoo_classic_rock_paper_scissors_runs_through_the_adapter():
    env = rps_v2.parallel_env(max_cycles=10)
    mdps = [ParallelEnvMDP(rps_v2.parallel_env(max_cycles=10), one_hot(env.observation_space("player_0")))
            for _ in range(2)]
    policies = {"p": Recorder()}
    mapping = PolicyMapping(lambda a, e: "p", ["p"], (), {})
    sampler = Sampler(mdps, mapping, policies, seed=0)
    for _ in range(35):
        sampler.tick()
    # 2 players x (3 full episodes + 1 running) per env: an episode is 10 steps, reset costs no tick.
    assert mapping.counts["p"] == 2 * 2 * 4
    assert all(len(batch) == 4 for batch in policies["p"].batches)
    assert sampler.env_frames == 70
