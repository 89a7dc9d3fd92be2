"""Reinforcement-learning algorithms as pure functions of batches and parameters."""

from .batch import build_rollout_batch
from .ppo import RolloutBatch, clipped_policy_loss, normalize, ppo_loss, ppo_update, value_loss
from .returns import generalized_advantages, next_values_of_fragments

__all__ = [
    "RolloutBatch",
    "build_rollout_batch",
    "clipped_policy_loss",
    "generalized_advantages",
    "next_values_of_fragments",
    "normalize",
    "ppo_loss",
    "ppo_update",
    "value_loss",
]
