"""A3C's actor-side step: the advantage actor-critic loss of one rollout and its gradients.

The actor computes gradients with the weights it has; the learner only applies them. Gradients
travel as arrays, one per parameter, in the model's parameter order.
"""

from __future__ import annotations

import numpy as np
import torch

from ..config import A3CConfig
from ..mdp import ExperienceBatch
from ..models import ActorCritic
from .batch import build_rollout_batch


def a3c_gradients(model: ActorCritic, experience: ExperienceBatch, config: A3CConfig) -> tuple[list[np.ndarray], dict[str, float]]:
    """Gradients of policy-gradient + value + entropy losses over one rollout (GAE advantages)."""
    batch = build_rollout_batch(experience, model, config.gamma, config.gae_lambda, torch.device("cpu"),
                                config.reward_scale)
    log_probs, entropy, values = model.evaluate(batch.observations, batch.actions)
    policy_loss = -(batch.advantages * log_probs).mean()
    value_loss = 0.5 * (values - batch.returns).pow(2).mean()
    entropy_mean = entropy.mean()
    loss = policy_loss + config.value_weight * value_loss - config.entropy_weight * entropy_mean
    model.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
    gradients = [np.zeros(p.shape, np.float32) if p.grad is None else p.grad.detach().numpy().copy()
                 for p in model.parameters()]
    diagnostics = {"loss_policy": float(policy_loss.detach()), "loss_value": float(value_loss.detach()),
                   "entropy": float(entropy_mean.detach())}
    return gradients, diagnostics
