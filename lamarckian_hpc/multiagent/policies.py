"""Several actor-critics in one run: built together so that trained policies can share layers,
updated by PPO each from its own buffer, and frozen ones never touched.

Layer sharing follows RLlib's "shared layers" example: the first `shared_layers` fully connected
layers of the policy trunk are one module object used by every trained policy, so each policy's
update moves them and every policy sees the move at its next inference. Frozen policies never
share: a frozen snapshot must act the same for the whole run, and a layer another policy trains
would change it behind its back.
"""

from __future__ import annotations

from typing import Iterable

import gymnasium as gym
import numpy as np
import torch

from ..config import ModelConfig, PPOConfig
from ..mdp import ExperienceBatch
from ..models import ActorCritic
from ..rl import build_rollout_batch, ppo_update
from ..rl.ppo import RolloutBatch


def policy_layers(model: ActorCritic) -> torch.nn.Sequential:
    """The fully connected stack of an mlp trunk: (Linear, activation) pairs."""
    return model.trunk[1]


def build_policy_models(policy_ids: Iterable[str], trained: Iterable[str], observation_space: gym.Space,
                        action_space: gym.Space, model: ModelConfig, shared_layers: int = 0,
                        seed: int = 0, global_state_size: int = 0) -> dict[str, ActorCritic]:
    """One ActorCritic per policy id, each with its own initial weights (seeded per position);
    `global_state_size` > 0 gives every one a centralised critic (see models/actor_critic.py)."""
    ids, trained_set = list(policy_ids), set(trained)
    trained_ids = [pid for pid in ids if pid in trained_set]
    if shared_layers and model.kind != "mlp":
        raise ValueError(f"multiagent.shared_layers: layers can be shared by mlp models only, got model.kind={model.kind!r}")
    if shared_layers > len(model.policy_hidden_sizes):
        raise ValueError(f"multiagent.shared_layers: {shared_layers} exceeds the "
                         f"{len(model.policy_hidden_sizes)} layers of model.policy_hidden_sizes")
    models: dict[str, ActorCritic] = {}
    for index, policy_id in enumerate(ids):
        torch.manual_seed(seed * 1009 + index)
        models[policy_id] = ActorCritic(observation_space, action_space, model, global_state_size)
    if shared_layers and trained_ids:
        owner = policy_layers(models[trained_ids[0]])
        for policy_id in trained_ids[1:]:
            layers = policy_layers(models[policy_id])
            for layer in range(shared_layers):
                layers[2 * layer] = owner[2 * layer]
    for policy_id in set(ids) - trained_set:
        models[policy_id].requires_grad_(False)
    return models


class MultiPolicyLearner:
    """A PPO optimizer per trained policy; `update` takes each policy's batch."""

    def __init__(self, models: dict[str, ActorCritic], trained: Iterable[str], ppo: PPOConfig, seed: int = 0) -> None:
        self.models = models
        self.ppo = ppo
        self.trained = [pid for pid in models if pid in set(trained)]
        self.optimizers = {pid: torch.optim.Adam(models[pid].parameters(), lr=ppo.learning_rate, eps=1e-5)
                           for pid in self.trained}
        self.rng = np.random.default_rng(seed)
        self.versions = {pid: 0 for pid in models}
        self.device = torch.device("cpu")

    def rollout_batch(self, policy_id: str, experience: ExperienceBatch) -> RolloutBatch:
        """The first half of an update (GAE on the policy's critic), for a caller that updates
        several learners' policies in one batched step (`rl.batched_ppo`)."""
        if policy_id not in self.optimizers:
            raise ValueError(f"policy {policy_id!r} is frozen; trained policies: {self.trained}")
        ppo = self.ppo
        return build_rollout_batch(experience, self.models[policy_id], ppo.gamma, ppo.gae_lambda, self.device,
                                   ppo.reward_scale)

    def update(self, policy_id: str, experience: ExperienceBatch) -> dict[str, float]:
        batch = self.rollout_batch(policy_id, experience)
        diagnostics = ppo_update(self.models[policy_id], self.optimizers[policy_id], batch, self.ppo, self.rng)
        self.versions[policy_id] += 1
        return diagnostics
