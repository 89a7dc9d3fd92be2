"""Turns recorded experience into a PPO batch: critic values, bootstraps, GAE and returns."""

from __future__ import annotations

import numpy as np
import torch

from ..mdp import ExperienceBatch
from ..models import ActorCritic
from .ppo import RolloutBatch
from .returns import generalized_advantages, next_values_of_fragments


def build_rollout_batch(
    experience: ExperienceBatch,
    model: ActorCritic,
    gamma: float,
    gae_lambda: float,
    device: torch.device,
    reward_scale: float = 1.0,
) -> RolloutBatch:
    """Estimate advantages with the current critic; one forward pass covers steps and bootstraps."""
    observations = torch.from_numpy(experience.observations).to(device)
    bootstrap = torch.from_numpy(experience.bootstrap_observations).to(device)
    with torch.no_grad():
        values = model.value(torch.cat([observations, bootstrap])).cpu().numpy()
    step_values, bootstrap_values = values[: len(experience)], values[len(experience) :]
    next_values, segment_ends = next_values_of_fragments(
        step_values, experience.lengths, bootstrap_values, experience.terminated
    )
    rewards = experience.rewards * np.float32(reward_scale)
    advantages = generalized_advantages(rewards, step_values, next_values, segment_ends, gamma, gae_lambda)
    return RolloutBatch(
        observations=observations,
        actions=torch.from_numpy(experience.actions).to(device),
        old_log_probs=torch.from_numpy(experience.log_probs).to(device),
        advantages=torch.from_numpy(advantages).to(device),
        returns=torch.from_numpy(advantages + step_values).to(device),
    )
