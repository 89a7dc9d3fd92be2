"""IMPALA's learner update: V-trace targets from the current critic and policy, then an
actor-critic loss. Works on samples of any staleness; the importance weights correct for it.
With several learner ranks, each computes V-trace on its own fragments and the minibatches are
global (`rl.data_parallel`)."""

from __future__ import annotations

import numpy as np
import torch

from ..config import ImpalaConfig
from ..mdp import ExperienceBatch
from ..models import ActorCritic
from .data_parallel import SINGLE_PROCESS, GlobalMinibatch, GradientReducer, agree_on_shard
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
    reducer: GradientReducer = SINGLE_PROCESS,
) -> dict[str, float]:
    """`num_epochs` passes, each with V-trace targets from the current model, then shuffled
    minibatches. With `reducer` of several ranks, `experience` is this rank's shard."""
    observations = torch.from_numpy(experience.observations).to(device)
    actions = torch.from_numpy(experience.actions).to(device)
    bootstrap = torch.from_numpy(experience.bootstrap_observations).to(device)
    steps = GuardedSteps(model, optimizer, config.max_grad_norm, reducer)
    shard = agree_on_shard(reducer, len(experience))
    size = min(config.minibatch_size, shard.total)
    if size == 0:
        return steps.diagnostics()
    mean = torch.mean if reducer.world_size == 1 else GlobalMinibatch(size).mean
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
        vs_t, advantages_t = torch.from_numpy(vs).to(device), torch.from_numpy(advantages).to(device)
        for index in shard.minibatch_indices(rng.permutation(shard.total), size, device):
            log_probs, entropy, predicted = model.evaluate(observations[index], actions[index])
            policy_loss = -mean(advantages_t[index] * log_probs)
            value_loss = 0.5 * mean((predicted - vs_t[index]).pow(2))
            entropy_mean = mean(entropy)
            loss = config.policy_weight * policy_loss + config.value_weight * value_loss - config.entropy_weight * entropy_mean
            steps.step(loss, {"loss_policy": policy_loss, "loss_value": value_loss, "entropy": entropy_mean})
    return steps.diagnostics()
