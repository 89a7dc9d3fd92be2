"""An update's minibatch step recorded once as a CUDA graph, then replayed for every minibatch
(PPO's and IMPALA's).

Launched eagerly, one minibatch step of image Pong's CNN is about 150 kernels, each a few
microseconds of Python and driver work on the host; with minibatches of 256 the GPU finishes each
kernel before the next is launched and waits (measured on an H200: 5,043 launches per update, the
GPU busy 71 ms of about 200). A graph replays the whole step (gather the minibatch's rows, loss,
backward, clipping, the fused Adam step, the diagnostics' sums) as one launch.

What it takes: the step reads everything from static device buffers. The update's tensors are
copied into them (device to device, a fraction of a millisecond), and before each replay the
minibatch's indices into an index buffer; the minibatch order comes from the same generator, one
permutation per epoch, as in the eager update. The step is `GuardedSteps(sync_free=True)`'s: a
non-finite loss or gradient is skipped by the fused Adam kernel itself, and the loss parts are
summed in place in device tensors read once per update. Recording runs a few warm-up steps first
(CUDA's libraries allocate their workspaces there) with every step disallowed on the device, so
parameters and moments are as before. The graph is recorded again when what it baked in changes:
the algorithm's settings, the shapes, or the optimizer's state tensors (a checkpoint loaded).

Where it does not apply, the eager steps run: on a CPU; with an optimizer other than
`rl.adam.Adam`'s fused step; with several data-parallel processes (their gradients are reduced
between backward and clipping, which a graph of one process cannot hold); and where recording
fails (said once in the log).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from .adam import Adam
from .optim import GuardedSteps, skips_on_device

log = logging.getLogger(__name__)

#: Eager steps run before recording, all of them disallowed on the device (no parameter changes).
WARMUP_STEPS = 3

#: The loss of one minibatch, given its fields (the rows the indices pick): (loss, named parts).
MinibatchLoss = Callable[[Sequence[Tensor]], tuple[Tensor, dict[str, Tensor]]]


def data_parallel() -> bool:
    """Whether this process is one of several in a torch.distributed group."""
    distributed = torch.distributed
    return distributed.is_available() and distributed.is_initialized() and distributed.get_world_size() > 1


def why_not_captured(model: torch.nn.Module, optimizer: object) -> str | None:
    """None when an update of `model` with `optimizer` can be recorded; else the reason."""
    device = next(model.parameters()).device
    if device.type != "cuda":
        return f"the learner is on {device.type}"
    if not skips_on_device(optimizer):  # type: ignore[arg-type]
        return "the optimizer is not rl.adam.Adam's fused step"
    if data_parallel():
        return "the learner is one of several data-parallel processes"
    return None


class RecordingFailed(RuntimeError):
    """The step could not be recorded; nothing was changed, and the caller steps eagerly."""


class CapturedSteps:
    """Minibatch steps of one loss over static buffers, recorded once and replayed. An update calls
    `begin`, then per epoch `load` (its tensors) and `replay_epoch` (an order), then `diagnostics`."""

    def __init__(self, model: torch.nn.Module, optimizer: Adam) -> None:
        self.model, self.optimizer = model, optimizer
        self.device = next(model.parameters()).device
        self.graph: torch.cuda.CUDAGraph | None = None
        self.buffers: list[Tensor] = []
        self.index: Tensor | None = None
        self.steps: GuardedSteps | None = None
        self.key: Any = None
        #: The tensors the graph read and wrote when it was recorded (see the module's doc).
        self._recorded_with: list[Tensor] = []
        self.recordings = 0
        #: Why recording failed, once it has (then the learner steps eagerly from there on).
        self.unavailable: str | None = None

    def begin(self) -> None:
        """Start an update: the learning rate as the optimizer has it now, the sums at zero."""
        self.optimizer.sync_learning_rate()
        if self.steps is not None:
            self.steps.reset()

    def load(self, fields: Sequence[Tensor], minibatch: int, loss: MinibatchLoss, max_grad_norm: float,
             key: Any) -> None:
        """Copy `fields` (rows first, all the same number) into the buffers, recording the step of
        `loss` (gradients clipped to `max_grad_norm`) over minibatches of `minibatch` rows first if
        the graph is missing or stale (`key`: the settings the step bakes in, compared with ==)."""
        if not self._still_recorded(fields, minibatch, key):
            try:
                self._record(fields, minibatch, loss, max_grad_norm, key)
            except Exception as error:  # torch raises plain RuntimeErrors for what cannot be recorded
                self.graph = None
                self.unavailable = f"{type(error).__name__}: {error}".splitlines()[0]
                log.warning("minibatch step not recorded, launched eagerly instead: %s", self.unavailable)
                raise RecordingFailed(self.unavailable) from error
        for field, buffer in zip(fields, self.buffers):
            buffer[: len(field)].copy_(field, non_blocking=True)

    def replay_epoch(self, order: Tensor, size: int) -> None:
        """One replay per whole minibatch of `order` (a device permutation of `size` rows)."""
        assert self.graph is not None and self.index is not None
        minibatch = len(self.index)
        for start in range(0, size - minibatch + 1, minibatch):
            self.index.copy_(order[start : start + minibatch], non_blocking=True)
            self.graph.replay()

    def diagnostics(self) -> dict[str, float]:
        assert self.steps is not None
        return self.steps.diagnostics()

    def _state_tensors(self) -> list[Tensor]:
        tensors = list(self.model.parameters())
        for state in self.optimizer.state.values():
            tensors += list(state.values())
        return tensors

    def _still_recorded(self, fields: Sequence[Tensor], minibatch: int, key: Any) -> bool:
        if self.graph is None or self.index is None or len(fields) != len(self.buffers) or key != self.key:
            return False
        if len(self.index) != minibatch or len(fields[0]) > len(self.buffers[0]):
            return False
        if any(field.shape[1:] != buffer.shape[1:] or field.dtype != buffer.dtype
               for field, buffer in zip(fields, self.buffers)):
            return False
        current = self._state_tensors()
        return len(current) == len(self._recorded_with) and all(a is b for a, b in zip(current, self._recorded_with))

    def _body(self, loss: MinibatchLoss) -> None:
        assert self.index is not None and self.steps is not None
        self.steps.step(*loss([buffer[self.index] for buffer in self.buffers]))

    def _record(self, fields: Sequence[Tensor], minibatch: int, loss: MinibatchLoss, max_grad_norm: float,
                key: Any) -> None:
        self.graph = None
        capacity = max(len(fields[0]), len(self.buffers[0]) if self.buffers else 0)
        self.buffers = [torch.zeros((capacity, *field.shape[1:]), dtype=field.dtype, device=self.device)
                        for field in fields]
        for field, buffer in zip(fields, self.buffers):
            buffer[: len(field)].copy_(field)
        self.index = torch.arange(minibatch, device=self.device)
        steps = self.steps = GuardedSteps(self.model, self.optimizer, max_grad_norm, sync_free=True)
        steps.allowed = torch.zeros((), dtype=torch.bool, device=self.device)
        self.optimizer.sync_learning_rate()
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for _ in range(WARMUP_STEPS):  # disallowed: the fused kernel leaves everything as it was
                self._body(loss)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._body(loss)
        steps.allowed.fill_(True)
        steps.reset()
        self.graph = graph
        self.key = key.model_copy() if hasattr(key, "model_copy") else key  # a copy: configs are mutable
        self._recorded_with = self._state_tensors()
        self.recordings += 1
        log.info("minibatch step recorded as a CUDA graph (minibatch %d, batch capacity %d)", minibatch, capacity)
