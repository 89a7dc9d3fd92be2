"""Proximal Policy Optimisation: the clipped surrogate with GAE, normalised advantages and no KL
penalty (the paper's setting), as free loss functions and one update over a batch.

Nothing here knows where the batch came from: the serial trainer, an actor pool or a replay of
a stored file all hand over a `RolloutBatch`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from ..config import PPOConfig
from ..models import ActorCritic
from .adam import Adam
from .captured import CapturedSteps, RecordingFailed
from .device import to_device
from .optim import GuardedSteps


class RolloutBatch(NamedTuple):
    observations: Tensor  # [batch, *obs_shape]
    actions: Tensor  # [batch, *action_shape]
    old_log_probs: Tensor  # [batch]
    advantages: Tensor  # [batch]
    returns: Tensor  # [batch]

    def __len__(self) -> int:
        return self.old_log_probs.shape[0]

    def select(self, indices: Tensor) -> RolloutBatch:
        return RolloutBatch(*(field[indices] for field in self))


def clipped_policy_loss(log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor, clip_range: float) -> Tensor:
    """-E[min(r A, clip(r, 1-eps, 1+eps) A)] with r = pi/pi_old."""
    ratio = torch.exp(log_probs - old_log_probs)
    unclipped = ratio * advantages
    clipped = ratio.clamp(1.0 - clip_range, 1.0 + clip_range) * advantages
    return -torch.minimum(unclipped, clipped).mean()


def value_loss(values: Tensor, returns: Tensor) -> Tensor:
    """Half the mean squared error of the critic against the GAE returns."""
    return 0.5 * (values - returns).pow(2).mean()


def normalize(advantages: Tensor) -> Tensor:
    if advantages.numel() < 2:
        return advantages
    return (advantages - advantages.mean()) / (advantages.std() + 1e-8)


def ppo_loss(model: ActorCritic, batch: RolloutBatch, config: PPOConfig) -> tuple[Tensor, dict[str, Tensor]]:
    """The weighted PPO loss of one minibatch and its parts."""
    log_probs, entropy, values = model.evaluate(batch.observations, batch.actions)
    advantages = normalize(batch.advantages) if config.normalize_advantages else batch.advantages
    policy = clipped_policy_loss(log_probs, batch.old_log_probs, advantages, config.clip_range)
    critic = value_loss(values, batch.returns)
    entropy_mean = entropy.mean()
    total = config.policy_weight * policy + config.value_weight * critic - config.entropy_weight * entropy_mean
    with torch.no_grad():
        log_ratio = log_probs - batch.old_log_probs
        ratio_minus_one = log_ratio.exp() - 1.0
        approx_kl = (ratio_minus_one - log_ratio).mean()
        clip_fraction = (ratio_minus_one.abs() > config.clip_range).float().mean()
    parts = {"loss_policy": policy, "loss_value": critic, "entropy": entropy_mean,
             "approx_kl": approx_kl, "clip_fraction": clip_fraction}
    return total, parts


def ppo_update(
    model: ActorCritic,
    optimizer: torch.optim.Optimizer | Adam,
    batch: RolloutBatch,
    config: PPOConfig,
    rng: np.random.Generator,
    captured: CapturedSteps | None = None,
) -> dict[str, float]:
    """`num_epochs` passes of shuffled minibatches; returns the mean of each loss part and the
    number of minibatches skipped for a non-finite loss. With `rl.adam.Adam`'s fused step (on a
    GPU) nothing is read back before the end (`GuardedSteps`); with `captured`, each minibatch
    step is a replay of a recorded CUDA graph (`rl.captured`), eager where recording fails."""
    size = len(batch)
    minibatch_size = min(config.minibatch_size, size)
    if captured is not None:
        try:
            captured.begin()
            captured.load(tuple(batch), minibatch_size, lambda fields: ppo_loss(model, RolloutBatch(*fields), config),
                          config.max_grad_norm, config)
        except RecordingFailed:
            pass
        else:
            for _ in range(config.num_epochs):
                captured.replay_epoch(to_device(rng.permutation(size), batch.old_log_probs.device), size)
            return captured.diagnostics()
    steps = GuardedSteps(model, optimizer, config.max_grad_norm)
    for _ in range(config.num_epochs):
        order = to_device(rng.permutation(size), batch.old_log_probs.device)
        for start in range(0, size - minibatch_size + 1, minibatch_size):
            steps.step(*ppo_loss(model, batch.select(order[start : start + minibatch_size]), config))
    return steps.diagnostics()
