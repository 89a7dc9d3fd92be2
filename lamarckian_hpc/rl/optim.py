"""Gradient steps that a bad minibatch cannot poison.

One NaN or infinite loss, from a reward spike, an overflowing observation or a bug in a game,
would turn every parameter into NaN at the next optimizer step, and a learner that has run for a
day would be lost. So each step checks the loss and the gradient norm first; a non-finite one
skips the step, is counted, and the update goes on with the next minibatch.

Two ways to decide. On the host (the CPU's way, and any optimizer's): the loss and the norm are
read back before the step, two waits per minibatch, which on a GPU stall the launch queue each time.
On the device (`sync_free`, with `rl.adam.Adam`'s fused step): the finiteness is a device flag
that the fused Adam kernel reads to skip the step itself, and the loss parts and the counts are
summed in device tensors, in place, read once by `diagnostics`. Nothing waits per minibatch, and
the same step can be recorded once in a CUDA graph and replayed (`rl.captured`).

With several learner ranks (`rl.data_parallel`), each step first sums the gradients over the ranks,
and the skip is decided from the summed values, so that every rank takes the same steps.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .adam import Adam
from .data_parallel import SINGLE_PROCESS, GradientReducer

#: Diagnostic: minibatch steps skipped because their loss or gradients were not finite.
NONFINITE_STEPS = "nonfinite_steps"


def skips_on_device(optimizer: torch.optim.Optimizer | Adam) -> bool:
    """Whether `optimizer` can skip a step from a device flag (`Adam` with its fused step)."""
    return isinstance(optimizer, Adam) and optimizer.fused


class GuardedSteps:
    """Optimizer steps over an update's minibatches, and the mean of each loss part over the
    steps that were taken."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | Adam, max_grad_norm: float,
                 reducer: GradientReducer = SINGLE_PROCESS, sync_free: bool | None = None) -> None:
        """`reducer`: the learner ranks whose gradients each step sums (`rl.data_parallel`); their
        steps decide on the host. `sync_free`: decide and count on the device (see the module's
        doc); None: when the optimizer can (`skips_on_device`) and the learner is alone. A caller
        that branches on `step`'s answer (DQN's and SAC's target updates) passes False."""
        self.model, self.optimizer, self.max_grad_norm = model, optimizer, max_grad_norm
        self.reducer = reducer
        # Listed once: walking the module tree for every step is a visible cost for a small network.
        self.parameters = [p for p in model.parameters() if p.requires_grad]
        if sync_free is None:
            sync_free = skips_on_device(optimizer) and reducer.world_size == 1
        self.sync_free = sync_free
        if self.sync_free and reducer.world_size > 1:
            raise ValueError("GuardedSteps(sync_free=True) is for one learner rank: ranks decide on the host")
        if self.sync_free and not skips_on_device(optimizer):
            raise ValueError("GuardedSteps(sync_free=True) needs rl.adam.Adam with its fused step")
        self.names: tuple[str, ...] | None = None
        self.sums: Tensor | None = None  # the loss parts summed as one tensor, read once at the end
        self.taken = 0
        self.skipped = 0
        #: sync_free: [taken, skipped] as float64 on the device, added to in place.
        self.counts: Tensor | None = None
        #: sync_free: a device flag ANDed into every decision; 0 skips every step (a graph's warm-up).
        self.allowed: Tensor | None = None

    def step(self, loss: Tensor, parts: dict[str, Tensor]) -> bool | None:
        """Back-propagate `loss` and step, unless the loss or the gradient norm is not finite.
        Returns whether the step was taken; None when that is decided on the device (`sync_free`)."""
        if self.reducer.world_size > 1:
            return self._step_across_ranks(loss, parts)
        self.optimizer.zero_grad(set_to_none=True)
        if not self.sync_free and not bool(torch.isfinite(loss)):
            self.skipped += 1
            return False
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(self.parameters, self.max_grad_norm, foreach=True)
        if self.sync_free:
            self._step_on_device(loss, norm, parts)
            return None
        if not bool(torch.isfinite(norm)):
            self.optimizer.zero_grad(set_to_none=True)
            self.skipped += 1
            return False
        self.optimizer.step()
        self._add_taken(parts)
        return True

    def _step_across_ranks(self, loss: Tensor, parts: dict[str, Tensor]) -> bool:
        """`step` on one of several learner ranks: `loss` is this rank's share of the minibatch loss.
        One collective sums, as one buffer, the gradients, which parameters have one on any rank, and
        whether any rank's loss is not finite; every rank then clips and steps (or skips) alike."""
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()  # a non-finite loss is flagged below; its gradients are never applied
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.parameters]
        flags = torch.tensor([0.0] + [float(p.grad is not None) for p in self.parameters],
                             dtype=grads[0].dtype, device=grads[0].device)
        flags[0] = (~torch.isfinite(loss.detach())).to(flags.dtype)
        self.reducer.all_reduce_sum_([*grads, flags])
        nonfinite_loss, *held = flags.tolist()
        for parameter, grad, has in zip(self.parameters, grads, held):
            parameter.grad = grad if has > 0 else None
        norm = torch.nn.utils.clip_grad_norm_(self.parameters, self.max_grad_norm, foreach=True)
        if nonfinite_loss > 0 or not bool(torch.isfinite(norm)):
            self.optimizer.zero_grad(set_to_none=True)
            self.skipped += 1
            return False
        self.optimizer.step()
        self._add_taken(parts)
        return True

    def _add_taken(self, parts: dict[str, Tensor]) -> None:
        """Count a step taken on the host's decision, and add its loss parts to the sums."""
        if self.names is None:
            self.names = tuple(parts)
        values = torch.stack([value.detach() for value in parts.values()]).double()
        self.sums = values if self.sums is None else self.sums + values
        self.taken += 1

    def _step_on_device(self, loss: Tensor, norm: Tensor, parts: dict[str, Tensor]) -> None:
        """The step, skipped by the fused kernel itself when the loss or the norm is not finite;
        the parts and counts added in place (so that a recorded step adds at every replay)."""
        if self.names is None:
            self.names = tuple(parts)
            self.sums = torch.zeros(len(parts), dtype=torch.float64, device=loss.device)
        if self.counts is None:
            self.counts = torch.zeros(2, dtype=torch.float64, device=loss.device)
        if self.allowed is None:
            self.allowed = torch.ones((), dtype=torch.bool, device=loss.device)
        assert self.sums is not None and self.counts is not None and self.allowed is not None
        finite = torch.isfinite(loss) & torch.isfinite(norm) & self.allowed
        self.optimizer.step(found_inf=(~finite).float())  # type: ignore[call-arg]
        values = torch.stack([value.detach() for value in parts.values()]).double()
        self.sums.add_(torch.where(finite, values, 0.0))
        taken = finite.double()
        self.counts.add_(torch.stack([taken, 1.0 - taken]))

    def reset(self) -> None:
        """Start the sums and counts again (in place: a recorded step keeps adding to the same tensors)."""
        if self.sync_free and self.sums is not None and self.counts is not None:
            self.sums.zero_()
            self.counts.zero_()
        elif not self.sync_free:
            self.sums = None
        self.taken = self.skipped = 0

    def diagnostics(self) -> dict[str, float]:
        """The mean of each loss part over the steps taken (over every rank: each rank's parts are its
        shares of the minibatch means, summed here in one collective), and the steps skipped."""
        if self.sync_free and self.counts is not None and self.sums is not None:
            values = torch.cat([self.sums, self.counts]).tolist()  # the update's one read back
            taken, skipped = values[-2], values[-1]
            self.taken, self.skipped = int(taken), int(skipped)
            sums: list[float] = values[:-2]
        else:
            taken, skipped = self.taken, self.skipped
            totals = self.sums
            if self.reducer.world_size > 1 and totals is not None:  # `taken` is the same on every rank
                totals = totals.clone()
                self.reducer.all_reduce_sum_([totals])
            sums = totals.tolist() if totals is not None else []
        means: dict[str, float] = {}
        if taken and self.names is not None:
            means = {name: total / taken for name, total in zip(self.names, sums)}
        return {**means, NONFINITE_STEPS: float(skipped)}
