"""Several actor-critics in one run: built together so that trained policies can share layers,
updated by PPO each from its own buffer, and frozen ones never touched.

Layer sharing follows RLlib's "shared layers" example: the first `shared_layers` fully connected
layers of the policy trunk are one module object used by every trained policy, so each policy's
update moves them and every policy sees the move at its next inference. Frozen policies never
share: a frozen snapshot must act the same for the whole run, and a layer another policy trains
would change it behind its back.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from ..config import ModelConfig, RunConfig
from ..mdp import ExperienceBatch
from ..models import ActorCritic
from ..rl.learner import PPOLearner


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
    """A PPO learner per trained policy: the one a single-policy run trains with
    (`rl.learner.PPOLearner`), each with its own optimizer, minibatch order and version, over
    models built together (`build_policy_models`). Frozen policies have no learner. The serial
    multi-agent trainer, the league's learners and the distributed runtime all update through it."""

    def __init__(self, models: dict[str, ActorCritic], trained: Iterable[str], config: RunConfig) -> None:
        self.models = models
        trained_set = set(trained)
        self.learners: dict[str, PPOLearner] = {}
        torch.manual_seed(config.seed)
        for index, policy_id in enumerate(pid for pid in models if pid in trained_set):
            learner = PPOLearner(config, None, None, models[policy_id])
            learner.rng = np.random.default_rng([config.seed, index])  # each its own minibatch order
            self.learners[policy_id] = learner
        self.frozen = tuple(policy_id for policy_id in models if policy_id not in self.learners)
        self.device = next(iter(self.learners.values())).device if self.learners else torch.device("cpu")
        for policy_id in self.frozen:
            self.models[policy_id].to(self.device)

    @property
    def version(self) -> int:
        """Updates of all policies so far."""
        return sum(learner.version for learner in self.learners.values())

    @property
    def versions(self) -> dict[str, int]:
        """Each policy's own version (a frozen one stays 0)."""
        return {policy_id: self.learners[policy_id].version if policy_id in self.learners else 0
                for policy_id in self.models}

    def learner(self, policy_id: str) -> PPOLearner:
        if policy_id not in self.learners:
            raise ValueError(f"policy {policy_id!r} is frozen; trained policies: {list(self.learners)}")
        return self.learners[policy_id]

    def update(self, policy_id: str, experience: ExperienceBatch, env_frames: int = 0) -> dict[str, float]:
        """One PPO update of `policy_id` on its batch; its version goes up by one."""
        return self.learner(policy_id).update(experience, env_frames)

    def state_dict(self) -> dict[str, Any]:
        """Each trained policy's learner state (parameters, optimizer, version, generators)."""
        return {"version": self.version,
                "policies": {pid: learner.state_dict() for pid, learner in self.learners.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        missing = sorted(set(self.learners) - set(state["policies"]))
        if missing:
            raise ValueError(f"the checkpoint has no state for the trained policies {missing}")
        for policy_id, learner in self.learners.items():
            learner.load_state_dict(state["policies"][policy_id])
