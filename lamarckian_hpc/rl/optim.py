"""Gradient steps that a bad minibatch cannot poison.

One NaN or infinite loss, from a reward spike, an overflowing observation or a bug in a game,
would turn every parameter into NaN at the next optimizer step, and a learner that has run for a
day would be lost. So each step checks the loss and the gradient norm first; a non-finite one
skips the step, is counted, and the update goes on with the next minibatch.

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


class GuardedSteps:
    """Optimizer steps over an update's minibatches, and the mean of each loss part over the
    steps that were taken."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | Adam, max_grad_norm: float,
                 reducer: GradientReducer = SINGLE_PROCESS) -> None:
        self.model, self.optimizer, self.max_grad_norm = model, optimizer, max_grad_norm
        self.reducer = reducer
        # Listed once: walking the module tree for every step is a visible cost for a small network.
        self.parameters = [p for p in model.parameters() if p.requires_grad]
        self.names: tuple[str, ...] | None = None
        self.sums: Tensor | None = None  # the loss parts summed as one tensor, read once at the end
        self.taken = 0
        self.skipped = 0

    def step(self, loss: Tensor, parts: dict[str, Tensor]) -> bool:
        """Back-propagate `loss` and step, unless the loss or the gradient norm is not finite."""
        if self.reducer.world_size > 1:
            return self._step_across_ranks(loss, parts)
        self.optimizer.zero_grad(set_to_none=True)
        if not bool(torch.isfinite(loss)):
            self.skipped += 1
            return False
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(self.parameters, self.max_grad_norm, foreach=True)
        if not bool(torch.isfinite(norm)):
            self.optimizer.zero_grad(set_to_none=True)
            self.skipped += 1
            return False
        self.optimizer.step()
        if self.names is None:
            self.names = tuple(parts)
        values = torch.stack([value.detach() for value in parts.values()]).double()
        self.sums = values if self.sums is None else self.sums + values
        self.taken += 1
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
        if self.names is None:
            self.names = tuple(parts)
        values = torch.stack([value.detach() for value in parts.values()]).double()
        self.sums = values if self.sums is None else self.sums + values
        self.taken += 1
        return True

    def diagnostics(self) -> dict[str, float]:
        """The mean of each loss part over the steps taken (over every rank: each rank's parts are its
        shares of the minibatch means, summed here in one collective), and the steps skipped."""
        sums = self.sums
        if self.reducer.world_size > 1 and sums is not None:  # `taken` is the same on every rank
            sums = sums.clone()
            self.reducer.all_reduce_sum_([sums])
        means: dict[str, float] = {}
        if self.taken and self.names is not None and sums is not None:
            means = {name: total / self.taken for name, total in zip(self.names, sums.tolist())}
        return {**means, NONFINITE_STEPS: float(self.skipped)}
