"""IMPALA's learner update: V-trace targets from the current critic and policy, then an
actor-critic loss. Works on samples of any staleness; the importance weights correct for it.
With several learner ranks, each computes V-trace on its own fragments and the minibatches are
global (`rl.data_parallel`)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from ..config import ImpalaConfig
from ..mdp import ExperienceBatch
from ..models import ActorCritic
from .captured import CapturedSteps, RecordingFailed
from .data_parallel import SINGLE_PROCESS, GlobalMinibatch, GradientReducer, agree_on_shard
from .device import to_device
from .optim import GuardedSteps
from .returns import next_values_of_fragments
from .vtrace import vtrace


def impala_loss(model: ActorCritic, observations: torch.Tensor, actions: torch.Tensor, vs: torch.Tensor,
                advantages: torch.Tensor, config: ImpalaConfig,
                mean: Callable[[torch.Tensor], torch.Tensor] = torch.mean,
                ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The weighted actor-critic loss of one minibatch against its V-trace targets, and its parts.
    `mean`: over the minibatch, or a learner rank's share of the global minibatch's mean
    (`rl.data_parallel.GlobalMinibatch.mean`)."""
    log_probs, entropy, predicted = model.evaluate(observations, actions)
    policy_loss = -mean(advantages * log_probs)
    value_loss = 0.5 * mean((predicted - vs).pow(2))
    entropy_mean = mean(entropy)
    loss = config.policy_weight * policy_loss + config.value_weight * value_loss - config.entropy_weight * entropy_mean
    return loss, {"loss_policy": policy_loss, "loss_value": value_loss, "entropy": entropy_mean}


def impala_update(
    model: ActorCritic,
    optimizer: torch.optim.Optimizer,
    experience: ExperienceBatch,
    config: ImpalaConfig,
    rng: np.random.Generator,
    device: torch.device,
    reducer: GradientReducer = SINGLE_PROCESS,
    pinned: bool = True,
    captured: CapturedSteps | None = None,
) -> dict[str, float]:
    """`num_epochs` passes, each with V-trace targets from the current model, then shuffled
    minibatch steps. With `reducer` of several ranks, `experience` is this rank's shard. The
    experience goes to `device` once (`rl.device.to_device`); with a fused Adam nothing is read back
    per minibatch; with `captured` (one rank only), each minibatch step is a replay of a recorded
    CUDA graph (`rl.captured`)."""
    observations = to_device(experience.observations, device, pinned)
    actions = to_device(experience.actions, device, pinned)
    bootstrap = to_device(experience.bootstrap_observations, device, pinned)
    steps = GuardedSteps(model, optimizer, config.max_grad_norm, reducer)
    shard = agree_on_shard(reducer, len(experience))
    size = min(config.minibatch_size, shard.total)
    if size == 0:
        return steps.diagnostics()
    mean = torch.mean if reducer.world_size == 1 else GlobalMinibatch(size).mean
    if reducer.world_size > 1:
        captured = None
    if captured is not None:
        captured.begin()
    for _ in range(config.num_epochs):
        with torch.no_grad():  # targets from the current policy and critic, once per pass
            target_log_probs, _, values = model.evaluate(observations, actions)
            bootstrap_values = model.value(bootstrap).cpu().numpy()
        values_np = values.cpu().numpy()
        next_values, segment_ends = next_values_of_fragments(
            values_np, experience.lengths, bootstrap_values, experience.terminated)
        vs, advantages = vtrace(experience.log_probs, target_log_probs.cpu().numpy(),
                                experience.rewards * np.float32(config.reward_scale), values_np, next_values,
                                segment_ends, config.gamma, config.rho_bar, config.c_bar)
        vs_t, advantages_t = to_device(vs, device, pinned), to_device(advantages, device, pinned)
        if captured is not None:
            try:
                captured.load((observations, actions, vs_t, advantages_t), size,
                              lambda fields: impala_loss(model, *fields, config), config.max_grad_norm, config)
            except RecordingFailed:
                captured = None
            else:
                captured.replay_epoch(to_device(rng.permutation(len(experience)), device, pinned), len(experience))
                continue
        for index in shard.minibatch_indices(rng.permutation(shard.total), size, device):
            steps.step(*impala_loss(model, observations[index], actions[index], vs_t[index], advantages_t[index],
                                    config, mean))
    return captured.diagnostics() if captured is not None else steps.diagnostics()
