"""Proximal Policy Optimisation: the clipped surrogate with GAE, normalised advantages and no KL
penalty (the paper's setting), as free loss functions and one update over a batch.

Nothing here knows where the batch came from: the serial trainer, an actor pool or a replay of
a stored file all hand over a `RolloutBatch`. With several learner ranks each hands over its own
shard, and `reducer` makes their updates the one update of the shards laid end to end
(`rl.data_parallel`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from ..config import PPOConfig
from ..models import ActorCritic
from .adam import Adam
from .captured import CapturedSteps, RecordingFailed
from .data_parallel import SINGLE_PROCESS, GlobalMinibatch, GradientReducer, agree_on_shard, global_minibatches
from .device import to_device
from .optim import GuardedSteps

#: How a loss averages over a minibatch: torch.mean for a whole minibatch, or a rank's share of the
#: global mean (`GlobalMinibatch.mean`).
Mean = Callable[[Tensor], Tensor]


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


def clipped_policy_loss(log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor, clip_range: float,
                        mean: Mean = torch.mean) -> Tensor:
    """-E[min(r A, clip(r, 1-eps, 1+eps) A)] with r = pi/pi_old."""
    ratio = torch.exp(log_probs - old_log_probs)
    unclipped = ratio * advantages
    clipped = ratio.clamp(1.0 - clip_range, 1.0 + clip_range) * advantages
    return -mean(torch.minimum(unclipped, clipped))


def value_loss(values: Tensor, returns: Tensor, mean: Mean = torch.mean) -> Tensor:
    """Half the mean squared error of the critic against the GAE returns."""
    return 0.5 * mean((values - returns).pow(2))


def normalize(advantages: Tensor) -> Tensor:
    if advantages.numel() < 2:
        return advantages
    return (advantages - advantages.mean()) / (advantages.std() + 1e-8)


def ppo_loss(model: ActorCritic, batch: RolloutBatch, config: PPOConfig,
             across: GlobalMinibatch | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """The weighted PPO loss of one minibatch and its parts. `across`: `batch` is this rank's rows of
    a global minibatch, and the loss and its parts are its shares of the global ones."""
    log_probs, entropy, values = model.evaluate(batch.observations, batch.actions)
    mean: Mean = torch.mean if across is None else across.mean
    advantages = batch.advantages
    if config.normalize_advantages:
        advantages = normalize(advantages) if across is None else across.normalize(advantages)
    policy = clipped_policy_loss(log_probs, batch.old_log_probs, advantages, config.clip_range, mean)
    critic = value_loss(values, batch.returns, mean)
    entropy_mean = mean(entropy)
    total = config.policy_weight * policy + config.value_weight * critic - config.entropy_weight * entropy_mean
    with torch.no_grad():
        log_ratio = log_probs - batch.old_log_probs
        ratio_minus_one = log_ratio.exp() - 1.0
        approx_kl = mean(ratio_minus_one - log_ratio)
        clip_fraction = mean((ratio_minus_one.abs() > config.clip_range).float())
    parts = {"loss_policy": policy, "loss_value": critic, "entropy": entropy_mean,
             "approx_kl": approx_kl, "clip_fraction": clip_fraction}
    return total, parts


def ppo_update(
    model: ActorCritic,
    optimizer: torch.optim.Optimizer | Adam,
    batch: RolloutBatch,
    config: PPOConfig,
    rng: np.random.Generator,
    reducer: GradientReducer = SINGLE_PROCESS,
    captured: CapturedSteps | None = None,
) -> dict[str, float]:
    """`num_epochs` passes of shuffled minibatches; returns the mean of each loss part and the
    number of minibatches skipped for a non-finite loss. With `reducer` of several ranks, `batch` is
    this rank's shard, and every rank returns the diagnostics of the whole update. With
    `rl.adam.Adam`'s fused step (on a GPU) nothing is read back before the end (`GuardedSteps`); with
    `captured` (one rank only), each minibatch step is a replay of a recorded CUDA graph
    (`rl.captured`), eager where recording fails."""
    if captured is not None and reducer.world_size == 1:
        size = len(batch)
        try:
            captured.begin()
            captured.load(tuple(batch), min(config.minibatch_size, size),
                          lambda fields: ppo_loss(model, RolloutBatch(*fields), config), config.max_grad_norm, config)
        except RecordingFailed:
            pass
        else:
            for _ in range(config.num_epochs):
                captured.replay_epoch(to_device(rng.permutation(size), batch.old_log_probs.device), size)
            return captured.diagnostics()
    steps = GuardedSteps(model, optimizer, config.max_grad_norm, reducer)
    shard = agree_on_shard(reducer, len(batch))
    minibatch_size = min(config.minibatch_size, shard.total)
    if minibatch_size == 0:
        return steps.diagnostics()
    device = batch.old_log_probs.device
    minibatches = [indices for _ in range(config.num_epochs)
                   for indices in shard.minibatch_indices(rng.permutation(shard.total), minibatch_size, device)]
    shared: list[GlobalMinibatch | None] = [None] * len(minibatches)
    if reducer.world_size > 1:
        shared = list(global_minibatches(reducer, minibatches, minibatch_size,
                                         batch.advantages if config.normalize_advantages else None))
    for indices, across in zip(minibatches, shared, strict=True):
        steps.step(*ppo_loss(model, batch.select(indices), config, across))
    return steps.diagnostics()
