"""A PPO update's minibatch step recorded once as a CUDA graph, then replayed for every minibatch.

Launched eagerly, one minibatch step of image Pong's CNN is about 150 kernels, each a few
microseconds of Python and driver work on the host; with minibatches of 256 the GPU finishes each
kernel before the next is launched and waits (measured on an H200: 5,043 launches per update, the
GPU busy 71 ms of about 200). A graph replays the whole step (gather the minibatch's rows, loss,
backward, clipping, the fused Adam step, the diagnostics' sums) as one launch.

What it takes: the step reads everything from static device buffers. The update's batch is
copied into them (device to device, a fraction of a millisecond), and before each replay the
minibatch's indices into an index buffer; the minibatch order comes from the same generator, one
permutation per epoch, as in `ppo_update`. The step is `GuardedSteps(sync_free=True)`'s: a
non-finite loss or gradient is skipped by the fused Adam kernel itself, and the loss parts are
summed in place in device tensors read once per update. Recording runs a few warm-up steps first
(CUDA's libraries allocate their workspaces there) with every step disallowed on the device, so
parameters and moments are as before.

Where it does not apply, the eager steps run (`ppo_update`): on a CPU; with an optimizer other
than `rl.adam.Adam`'s fused step; with several data-parallel processes (their gradients are
reduced between backward and clipping, which a graph of one process cannot hold); and for a CNN
under autocast (`model.cnn_precision: bfloat16`: autocast's weight cache cannot be recorded).
"""

from __future__ import annotations

import logging

import numpy as np
import torch
from torch import Tensor

from ..config import PPOConfig
from .adam import Adam
from .device import to_device
from .optim import GuardedSteps, skips_on_device
from .ppo import RolloutBatch, ppo_loss

log = logging.getLogger(__name__)

#: Eager steps run before recording, all of them disallowed on the device (no parameter changes).
WARMUP_STEPS = 3


def data_parallel() -> bool:
    """Whether this process is one of several in a torch.distributed group."""
    distributed = torch.distributed
    return distributed.is_available() and distributed.is_initialized() and distributed.get_world_size() > 1


def why_not_captured(model: torch.nn.Module, optimizer: object) -> str | None:
    """None when a PPO update of `model` with `optimizer` can be recorded; else the reason."""
    device = next(model.parameters()).device
    if device.type != "cuda":
        return f"the learner is on {device.type}"
    if not skips_on_device(optimizer):  # type: ignore[arg-type]
        return "the optimizer is not rl.adam.Adam's fused step"
    if data_parallel():
        return "the learner is one of several data-parallel processes"
    if any(getattr(module, "compute_dtype", None) is not None for module in model.modules()):
        return "the model computes under autocast (model.cnn_precision)"
    return None


class CapturedPPOSteps:
    """`ppo_update` with every minibatch step a replay of one recorded CUDA graph."""

    def __init__(self, model: torch.nn.Module, optimizer: Adam, config: PPOConfig) -> None:
        self.model, self.optimizer, self.config = model, optimizer, config
        self.device = next(model.parameters()).device
        self.graph: torch.cuda.CUDAGraph | None = None
        self.buffers: RolloutBatch | None = None
        self.index: Tensor | None = None
        self.steps: GuardedSteps | None = None
        #: The tensors the graph read and wrote when it was recorded: if any has been replaced since
        #: (a checkpoint loaded into the optimizer, a member's state copied in), it is recorded again.
        self._recorded_with: list[Tensor] = []
        self.recordings = 0

    def update(self, batch: RolloutBatch, rng: np.random.Generator) -> dict[str, float]:
        """What `ppo_update(model, optimizer, batch, config, rng)` does, by replays."""
        size = len(batch)
        minibatch = min(self.config.minibatch_size, size)
        if not self._still_recorded(batch, minibatch):
            self._record(batch, minibatch)
        assert self.graph is not None and self.buffers is not None and self.index is not None and self.steps
        for field, buffer in zip(batch, self.buffers):
            buffer[:size].copy_(field, non_blocking=True)
        self.optimizer.sync_learning_rate()
        self.steps.reset()
        for _ in range(self.config.num_epochs):
            order = to_device(rng.permutation(size), self.device)
            for start in range(0, size - minibatch + 1, minibatch):
                self.index.copy_(order[start : start + minibatch], non_blocking=True)
                self.graph.replay()
        return self.steps.diagnostics()

    def _state_tensors(self) -> list[Tensor]:
        tensors = list(self.model.parameters())
        for state in self.optimizer.state.values():
            tensors += list(state.values())
        return tensors

    def _still_recorded(self, batch: RolloutBatch, minibatch: int) -> bool:
        if self.graph is None or self.buffers is None or self.index is None:
            return False
        if len(self.index) != minibatch or len(batch) > len(self.buffers.observations):
            return False
        if any(field.shape[1:] != buffer.shape[1:] or field.dtype != buffer.dtype
               for field, buffer in zip(batch, self.buffers)):
            return False
        current = self._state_tensors()
        return len(current) == len(self._recorded_with) and all(a is b for a, b in zip(current, self._recorded_with))

    def _body(self) -> None:
        assert self.buffers is not None and self.index is not None and self.steps is not None
        minibatch = RolloutBatch(*(buffer[self.index] for buffer in self.buffers))
        self.steps.step(*ppo_loss(self.model, minibatch, self.config))  # type: ignore[arg-type]

    def _record(self, batch: RolloutBatch, minibatch: int) -> None:
        self.graph = None
        capacity = max(len(batch), len(self.buffers.observations) if self.buffers is not None else 0)
        self.buffers = RolloutBatch(*(torch.zeros((capacity, *field.shape[1:]), dtype=field.dtype, device=self.device)
                                      for field in batch))
        for field, buffer in zip(batch, self.buffers):
            buffer[: len(batch)].copy_(field)
        self.index = torch.arange(minibatch, device=self.device)
        self.steps = GuardedSteps(self.model, self.optimizer, self.config.max_grad_norm, sync_free=True)
        self.steps.allowed = torch.zeros((), dtype=torch.bool, device=self.device)
        self.optimizer.sync_learning_rate()
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for _ in range(WARMUP_STEPS):  # disallowed: the fused kernel leaves everything as it was
                self._body()
        torch.cuda.current_stream(self.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._body()
        self.steps.allowed.fill_(True)
        self.steps.reset()
        self.graph = graph
        self._recorded_with = self._state_tensors()
        self.recordings += 1
        log.info("PPO minibatch step recorded as a CUDA graph (minibatch %d, batch capacity %d)", minibatch, capacity)
