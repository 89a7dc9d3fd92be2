"""Gradient steps that a bad minibatch cannot poison.

One NaN or infinite loss, from a reward spike, an overflowing observation or a bug in a game,
would turn every parameter into NaN at the next optimizer step, and a learner that has run for a
day would be lost. So each step checks the loss and the gradient norm first; a non-finite one
skips the step, is counted, and the update goes on with the next minibatch.
"""

from __future__ import annotations

import torch
from torch import Tensor

#: Diagnostic: minibatch steps skipped because their loss or gradients were not finite.
NONFINITE_STEPS = "nonfinite_steps"


class GuardedSteps:
    """Optimizer steps over an update's minibatches, and the mean of each loss part over the
    steps that were taken."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, max_grad_norm: float) -> None:
        self.model, self.optimizer, self.max_grad_norm = model, optimizer, max_grad_norm
        self.sums: dict[str, float] = {}
        self.taken = 0
        self.skipped = 0

    def step(self, loss: Tensor, parts: dict[str, Tensor]) -> bool:
        """Back-propagate `loss` and step, unless the loss or the gradient norm is not finite."""
        self.optimizer.zero_grad(set_to_none=True)
        if not bool(torch.isfinite(loss)):
            self.skipped += 1
            return False
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
        if not bool(torch.isfinite(norm)):
            self.optimizer.zero_grad(set_to_none=True)
            self.skipped += 1
            return False
        self.optimizer.step()
        for name, value in parts.items():
            self.sums[name] = self.sums.get(name, 0.0) + float(value.detach())
        self.taken += 1
        return True

    def diagnostics(self) -> dict[str, float]:
        means = {name: total / self.taken for name, total in self.sums.items()} if self.taken else {}
        return {**means, NONFINITE_STEPS: float(self.skipped)}
