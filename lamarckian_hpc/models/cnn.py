"""Convolutional encoders for image observations. Images come as [batch, H, W, C] or
[batch, C, H, W] in 0..255.

Two layer stacks, by `model.cnn_layers`:
- `table3`, the paper's Table III for image Pong: (ConvK4S2) x 4 then FC(256). About 27M
  multiply-adds per 84x84 observation, most of them in the second layer (21x21x64 outputs).
- `nature`, the DQN network of Mnih et al. (2015) that PPO's Atari results use: ConvK8S4(32),
  ConvK4S2(64), ConvK3S1(64), FC(512). About 9M multiply-adds per observation, so a CPU learner
  updates on about three times as many frames per second (`benchmarks/scale/learner_device.py`).
"""

from __future__ import annotations

import torch
from torch import nn
from torch._C._functorch import is_batchedtensor

from .layers import ACTIVATIONS, layer_init

#: Rows per pass through the convolutions on a CPU. A pass over thousands of frames at once (the
#: critic's pass over a whole batch) runs out of cache: measured here with DQN's stack on one
#: thread, 2,112 frames at once cost 596 us a frame, 128 at a time 270 us. A GPU takes them whole.
CPU_CHUNK_ROWS = 128
#: (out_channels, kernel, stride, padding) per convolution, and the feature size, per stack.
CNN_LAYERS: dict[str, tuple[tuple[tuple[int, int, int, int], ...], int]] = {
    "table3": (((32, 4, 2, 1), (64, 4, 2, 1), (64, 4, 2, 1), (64, 4, 2, 1)), 256),
    "nature": (((32, 8, 4, 0), (64, 4, 2, 0), (64, 3, 1, 0)), 512),
}
#: `model.cnn_precision`: what the encoder's products compute in. bfloat16 keeps float32's range with
#: 8 bits of mantissa; on CPUs with AVX-512 BF16, oneDNN runs the convolutions of a whole update
#: 1.5-2x as fast (`benchmarks/scale/learner_ceiling.py --cnn-precision`); on CPUs without, it may be slower.
PRECISIONS: dict[str, torch.dtype | None] = {"float32": None, "bfloat16": torch.bfloat16}
#: The layout of the float frames the convolutions read on a GPU (on a CPU always channels-last).
GPU_MEMORY_FORMAT = torch.channels_last


class ConvEncoder(nn.Module):
    def __init__(self, observation_shape: tuple[int, ...], activation: str = "leaky_relu",
                 layers: str = "table3", precision: str = "float32") -> None:
        super().__init__()
        if len(observation_shape) != 3:
            raise ValueError(f"a CNN needs image observations of 3 dims, got shape {observation_shape}")
        if layers not in CNN_LAYERS:
            raise ValueError(f"model.cnn_layers: {layers!r} is not one of {sorted(CNN_LAYERS)}")
        if precision not in PRECISIONS:
            raise ValueError(f"model.cnn_precision: {precision!r} is not one of {sorted(PRECISIONS)}")
        convolutions, feature_size = CNN_LAYERS[layers]
        # Channels-last when the last dim is the small one (gymnasium images are H, W, C).
        self.channels_last = observation_shape[-1] < observation_shape[0]
        in_channels = observation_shape[-1] if self.channels_last else observation_shape[0]
        modules: list[nn.Module] = []
        for out_channels, kernel, stride, padding in convolutions:
            modules += [layer_init(nn.Conv2d(in_channels, out_channels, kernel_size=kernel, stride=stride,
                                             padding=padding)),
                        ACTIVATIONS[activation]()]
            in_channels = out_channels
        self.convolutions = nn.Sequential(*modules, nn.Flatten())
        with torch.no_grad():
            flat = self.convolutions(torch.zeros(1, *self._to_channels_first_shape(observation_shape))).shape[1]
        self.head = nn.Sequential(layer_init(nn.Linear(flat, feature_size)), ACTIVATIONS[activation]())
        self.output_size = feature_size
        #: Rows per pass on a CPU; None: every batch in one pass (an exported graph, whose batch size is free).
        self.cpu_chunk_rows: int | None = CPU_CHUNK_ROWS
        #: The dtype the convolutions and the dense layer compute in (under autocast); None: float32.
        self.compute_dtype: torch.dtype | None = PRECISIONS[precision]

    def _to_channels_first_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return (shape[2], shape[0], shape[1]) if self.channels_last else shape

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if self.channels_last:
            images = images.permute(0, 3, 1, 2)
        if self.cpu_chunk_rows and images.device.type == "cpu" and len(images) > self.cpu_chunk_rows:
            return torch.cat([self._encode(chunk) for chunk in images.split(self.cpu_chunk_rows)])
        return self._encode(images)

    def _encode(self, images: torch.Tensor) -> torch.Tensor:
        # A product, not a division (a third of the time), on a float copy made in place. The copy
        # is laid out channels-last, which oneDNN's CPU convolutions take without reordering:
        # measured on one thread, a forward and backward pass over 256 frames cost 2.2 s instead of
        # 3.9 s with table3 and 0.70 s instead of 0.92 s with nature. The weights keep their
        # layout, so checkpoints and broadcasts do not change.
        # Under vmap (a batched PPO update of members whose encoder has no batched layer) the
        # frames carry a hidden members dim, which a channels-last layout cannot take.
        layout = torch.preserve_format if is_batchedtensor(images) else (
            torch.channels_last if images.device.type == "cpu" else GPU_MEMORY_FORMAT)
        scaled = images.to(torch.float32, memory_format=layout, copy=True).mul_(1.0 / 255.0)
        if self.compute_dtype is None:
            return self.head(self.convolutions(scaled))
        # The weights, their gradients and Adam's moments stay float32: autocast casts a layer's
        # inputs and weights for its product only. The features go on in float32, so the heads,
        # the log-probabilities and the losses are computed as without it.
        # On a GPU without autocast's weight cache (each weight is cast once a pass either way),
        # which a recorded CUDA graph cannot hold (`rl.captured`).
        with torch.autocast(scaled.device.type, dtype=self.compute_dtype, cache_enabled=scaled.device.type == "cpu"):
            features = self.head(self.convolutions(scaled))
        return features.float()
