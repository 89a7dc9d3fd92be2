"""Turns recorded fragments into a PPO batch: critic values, bootstraps, GAE and returns."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from ..mdp import FragmentArrays
from ..models import ActorCritic
from .ppo import RolloutBatch
from .returns import generalized_advantages, next_values_of_fragments


def build_rollout_batch(
    fragments: Sequence[FragmentArrays],
    model: ActorCritic,
    gamma: float,
    gae_lambda: float,
    device: torch.device,
    reward_scale: float = 1.0,
) -> RolloutBatch:
    """Concatenate fragments and estimate advantages with the current critic."""
    if not fragments:
        raise ValueError("cannot build a batch from no fragments")
    observations = torch.from_numpy(np.concatenate([f.observations for f in fragments])).to(device)
    bootstrap = torch.from_numpy(np.stack([f.bootstrap_observation for f in fragments])).to(device)
    with torch.no_grad():
        values = model.value(torch.cat([observations, bootstrap])).cpu().numpy()
    step_values, bootstrap_values = values[: len(observations)], values[len(observations) :]
    next_values, segment_ends = next_values_of_fragments(
        step_values,
        lengths=np.array([len(f) for f in fragments]),
        bootstrap_values=bootstrap_values,
        terminated=np.array([f.terminated for f in fragments]),
    )
    rewards = np.concatenate([f.rewards for f in fragments]) * np.float32(reward_scale)
    advantages = generalized_advantages(rewards, step_values, next_values, segment_ends, gamma, gae_lambda)
    actions = np.concatenate([f.actions for f in fragments])
    return RolloutBatch(
        observations=observations,
        actions=torch.from_numpy(actions).to(device),
        old_log_probs=torch.from_numpy(np.concatenate([f.log_probs for f in fragments])).to(device),
        advantages=torch.from_numpy(advantages).to(device),
        returns=torch.from_numpy(advantages + step_values).to(device),
    )
