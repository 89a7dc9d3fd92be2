"""Action-value network for DQN: the same fully connected trunk as the policy, one output per action."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from ..config import ModelConfig
from .layers import FloatFlatten, fully_connected, layer_init, output_size


class QNetwork(nn.Module):
    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config: ModelConfig) -> None:
        super().__init__()
        if not isinstance(action_space, gym.spaces.Discrete):
            raise ValueError(f"DQN needs discrete actions, got {action_space}")
        if not isinstance(observation_space, gym.spaces.Box) or config.kind != "mlp":
            raise ValueError("DQN here takes vector observations (Box) and an mlp model")
        in_features = int(np.prod(observation_space.shape))
        self.trunk = nn.Sequential(FloatFlatten(), fully_connected(in_features, config.policy_hidden_sizes, config.activation))
        self.head = layer_init(nn.Linear(output_size(config.policy_hidden_sizes, in_features), int(action_space.n)), gain=1.0)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return self.head(self.trunk(observations))

    def greedy(self, observations: torch.Tensor) -> torch.Tensor:
        """The actions of highest value: to evaluate with (a Q-network has no distribution to sample)."""
        return self.forward(observations).argmax(-1)
