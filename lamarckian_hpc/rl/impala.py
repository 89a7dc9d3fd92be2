"""IMPALA's learner update: V-trace targets from the current critic and policy, then an
actor-critic loss. Works on samples of any staleness; the importance weights correct for it."""

from __future__ import annotations

import numpy as np
import torch

from ..config import ImpalaConfig
from ..mdp import ExperienceBatch
from ..models import ActorCritic
from .device import to_device
from .optim import GuardedSteps
from .returns import next_values_of_fragments
from .vtrace import vtrace


def impala_update(
    model: ActorCritic,
    optimizer: torch.optim.Optimizer,
    experience: ExperienceBatch,
    config: ImpalaConfig,
    rng: np.random.Generator,
    device: torch.device,
    pinned: bool = True,
) -> dict[str, float]:
    """`num_epochs` passes of V-trace targets and shuffled minibatch steps. The experience goes to
    `device` once (`rl.device.to_device`); with a fused Adam nothing is read back per minibatch."""
    observations = to_device(experience.observations, device, pinned)
    actions = to_device(experience.actions, device, pinned)
    bootstrap = to_device(experience.bootstrap_observations, device, pinned)
    steps = GuardedSteps(model, optimizer, config.max_grad_norm)
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
        order = to_device(rng.permutation(len(experience)), device, pinned)
        size = min(config.minibatch_size, len(experience))
        for start in range(0, len(experience) - size + 1, size):
            index = order[start : start + size]
            log_probs, entropy, predicted = model.evaluate(observations[index], actions[index])
            policy_loss = -(advantages_t[index] * log_probs).mean()
            value_loss = 0.5 * (predicted - vs_t[index]).pow(2).mean()
            entropy_mean = entropy.mean()
            loss = config.policy_weight * policy_loss + config.value_weight * value_loss - config.entropy_weight * entropy_mean
            steps.step(loss, {"loss_policy": policy_loss, "loss_value": value_loss, "entropy": entropy_mean})
    return steps.diagnostics()
