"""Turns recorded experience into a PPO batch: critic values, bootstraps, GAE and returns."""

from __future__ import annotations

import numpy as np
import torch

from ..mdp import ExperienceBatch
from ..models import ActorCritic
from .device import to_device, to_device_mapped
from .ppo import RolloutBatch
from .returns import generalized_advantages, next_values_of_fragments


def build_rollout_batch(
    experience: ExperienceBatch,
    model: ActorCritic,
    gamma: float,
    gae_lambda: float,
    device: torch.device,
    reward_scale: float = 1.0,
    pinned: bool = True,
) -> RolloutBatch:
    """Estimate advantages with the current critic; one forward pass covers steps and bootstraps.
    The arrays go to `device` once (`rl.device.to_device`; `pinned` as there)."""
    bootstrap = to_device(experience.bootstrap_observations, device, pinned)
    if device.type == "cuda" and pinned:  # the critic's pass overlaps the copy (`to_device_mapped`)
        with torch.no_grad():
            observations, step_values = to_device_mapped(experience.observations, device, model.value)
            values = torch.cat([step_values, model.value(bootstrap)]).cpu().numpy()
    else:
        observations = to_device(experience.observations, device, pinned)
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
        actions=to_device(experience.actions, device, pinned),
        old_log_probs=to_device(experience.log_probs, device, pinned),
        advantages=to_device(advantages, device, pinned),
        returns=to_device(advantages + step_values, device, pinned),
    )
