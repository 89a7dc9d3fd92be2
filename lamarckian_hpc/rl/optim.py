"""Gradient steps that a bad minibatch cannot poison.

One NaN or infinite loss, from a reward spike, an overflowing observation or a bug in a game,
would turn every parameter into NaN at the next optimizer step, and a learner that has run for a
day would be lost. So each step checks the loss and the gradient norm first; a non-finite one
skips the step, is counted, and the update goes on with the next minibatch.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .adam import Adam

#: Diagnostic: minibatch steps skipped because their loss or gradients were not finite.
NONFINITE_STEPS = "nonfinite_steps"


class GuardedSteps:
    """Optimizer steps over an update's minibatches, and the mean of each loss part over the
    steps that were taken."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | Adam, max_grad_norm: float) -> None:
        self.model, self.optimizer, self.max_grad_norm = model, optimizer, max_grad_norm
        # Listed once: walking the module tree for every step is a visible cost for a small network.
        self.parameters = [p for p in model.parameters() if p.requires_grad]
        self.names: tuple[str, ...] | None = None
        self.sums: Tensor | None = None  # the loss parts summed as one tensor, read once at the end
        self.taken = 0
        self.skipped = 0

    def step(self, loss: Tensor, parts: dict[str, Tensor]) -> bool:
        """Back-propagate `loss` and step, unless the loss or the gradient norm is not finite."""
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

    def diagnostics(self) -> dict[str, float]:
        means: dict[str, float] = {}
        if self.taken and self.names is not None and self.sums is not None:
            means = {name: total / self.taken for name, total in zip(self.names, self.sums.tolist())}
        return {**means, NONFINITE_STEPS: float(self.skipped)}
