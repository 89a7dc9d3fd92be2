"""Convolutional encoder for image observations: (ConvK4S2) x 4 then FC(256), as in the paper's
Table III for image Pong. Images come as [batch, H, W, C] or [batch, C, H, W] in 0..255."""

from __future__ import annotations

import torch
from torch import nn

from .layers import ACTIVATIONS, layer_init


class ConvEncoder(nn.Module):
    def __init__(self, observation_shape: tuple[int, ...], activation: str = "leaky_relu",
                 channels: tuple[int, ...] = (32, 64, 64, 64), feature_size: int = 256) -> None:
        super().__init__()
        if len(observation_shape) != 3:
            raise ValueError(f"a CNN needs image observations of 3 dims, got shape {observation_shape}")
        # Channels-last when the last dim is the small one (gymnasium images are H, W, C).
        self.channels_last = observation_shape[-1] < observation_shape[0]
        in_channels = observation_shape[-1] if self.channels_last else observation_shape[0]
        layers: list[nn.Module] = []
        for out_channels in channels:
            layers += [layer_init(nn.Conv2d(in_channels, out_channels, kernel_size=4, stride=2, padding=1)),
                       ACTIVATIONS[activation]()]
            in_channels = out_channels
        self.convolutions = nn.Sequential(*layers, nn.Flatten())
        with torch.no_grad():
            flat = self.convolutions(torch.zeros(1, *self._to_channels_first_shape(observation_shape))).shape[1]
        self.head = nn.Sequential(layer_init(nn.Linear(flat, feature_size)), ACTIVATIONS[activation]())
        self.output_size = feature_size

    def _to_channels_first_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return (shape[2], shape[0], shape[1]) if self.channels_last else shape

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if self.channels_last:
            images = images.permute(0, 3, 1, 2)
        return self.head(self.convolutions(images / 255.0))
