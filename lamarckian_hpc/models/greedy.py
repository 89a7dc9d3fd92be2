"""The deterministic policy of a trained network, as a module of its own: a batch of observations
in, the greedy action and the network's outputs out. This is what `lamarckian-hpc export` writes
as ONNX and TorchScript, so it holds plain tensor maths only (no sampling, no Python branching on
values) and takes the observations in the dtype the environment gives (uint8 images stay uint8).

Each RL algorithm's entry names its module (`runtime/algorithms.py`, `greedy`); every one returns
a tuple whose names are its `output_names`, "actions" first:

- actor-critic (PPO, IMPALA, A3C): discrete actions are the argmax of the logits, continuous ones
  the Gaussian's mean (not clipped to the action bounds: environments clip, as in training);
  then "logits" or "mean", and the critic's "values".
- Q network (DQN): the argmax of "q_values".
- squashed Gaussian actor (SAC): tanh(mean) scaled to the action bounds, then the "mean" before
  the squashing.
"""

from __future__ import annotations

import torch
from torch import nn

from .heads import CategoricalHead


class ActorCriticGreedy(nn.Module):
    """argmax of the logits (discrete) or the mean (continuous), the logits or mean, the value."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.discrete = isinstance(model.head, CategoricalHead)
        self.output_names = ("actions", "logits" if self.discrete else "mean", "values")

    def forward(self, observations: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        features = self.model.trunk(observations)
        if self.discrete:
            outputs = self.model.head.logits(features)
            actions = outputs.argmax(dim=-1)
        else:
            outputs = self.model.head.mean(features)
            actions = outputs
        critic_features = features if self.model.critic_trunk is None else self.model.critic_trunk(observations)
        return actions, outputs, self.model.critic(critic_features).squeeze(-1)


class QGreedy(nn.Module):
    """argmax of the Q-values, and the Q-values."""

    output_names = ("actions", "q_values")

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, observations: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q_values = self.model(observations)
        return q_values.argmax(dim=-1), q_values


class SquashedGaussianGreedy(nn.Module):
    """tanh(mean) scaled to the action bounds (SAC's deterministic action), and the mean."""

    output_names = ("actions", "mean")

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, observations: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, _ = self.model.distribution(observations)
        return torch.tanh(mean) * self.model.action_scale + self.model.action_bias, mean
