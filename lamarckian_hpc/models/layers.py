"""Building blocks shared by every network: activations, initialisation and fully connected stacks."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

#: Below this many elements torch's own tanh is as fast or faster (the custom function's call costs more).
SIGMOID_TANH_MIN_ELEMENTS = 65536


class _SigmoidTanh(torch.autograd.Function):
    """tanh(x) as 2 sigmoid(2x) - 1, with tanh's own backward (grad * (1 - y^2))."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return torch.sigmoid(x * 2.0).mul_(2.0).sub_(1.0)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:  # type: ignore[override]
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        (output,) = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(grad, output)


class Tanh(nn.Tanh):
    """nn.Tanh that is fast on the CPU too. torch's CPU tanh is several times slower than its
    sigmoid (about 7x on [4096, 256] here, as slow as the matrix product before it), and a tanh
    network's learner spends a fifth of its update there; 2 sigmoid(2x) - 1 equals tanh within
    2e-7. GPUs, small inputs and anything else take torch's tanh."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002 - nn.Tanh's name
        if input.device.type != "cpu" or input.numel() < SIGMOID_TANH_MIN_ELEMENTS or not input.is_floating_point():
            return torch.tanh(input)
        return _SigmoidTanh.apply(input)


ACTIVATIONS: dict[str, type[nn.Module]] = {"leaky_relu": nn.LeakyReLU, "tanh": Tanh, "relu": nn.ReLU}


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
