"""Building blocks shared by every network: activations, initialisation and fully connected stacks."""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn

ACTIVATIONS: dict[str, type[nn.Module]] = {"leaky_relu": nn.LeakyReLU, "tanh": nn.Tanh, "relu": nn.ReLU}


class FloatFlatten(nn.Flatten):
    """Flatten that also makes the rows float: observations travel in their own dtype (uint8 for
    ALE's RAM and screens, a quarter of float32's bytes), and a linear layer takes only floats."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002 - nn.Flatten's name
        return super().forward(input).float()


def layer_init(layer: nn.Linear | nn.Conv2d, gain: float = math.sqrt(2.0)) -> nn.Module:
    """Orthogonal weights and zero bias: the initialisation PPO is usually tuned with."""
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def fully_connected(in_features: int, hidden_sizes: Sequence[int], activation: str) -> nn.Sequential:
    """FC(h1, h2, ...) with an activation after every layer; empty sizes give the identity."""
    layers: list[nn.Module] = []
    for size in hidden_sizes:
        layers += [layer_init(nn.Linear(in_features, size)), ACTIVATIONS[activation]()]
        in_features = size
    return nn.Sequential(*layers)


def output_size(hidden_sizes: Sequence[int], in_features: int) -> int:
    return hidden_sizes[-1] if hidden_sizes else in_features
