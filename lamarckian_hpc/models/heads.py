"""Action distributions written as plain tensor maths.

torch.distributions builds an object and validates its arguments on every call; at one call per
sampling tick that overhead is a visible part of the sampler's budget, so the two heads PPO needs
are spelled out here: sample, log-probability and entropy.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .layers import layer_init

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


#: mdp/action_masks.py::MASKED_LOGIT (models import only config): an illegal action's logit.
MASKED_LOGIT = -1e9


def masked_logits(logits: torch.Tensor, legal: torch.Tensor | None) -> torch.Tensor:
    """Logits with illegal actions (`legal` False) at MASKED_LOGIT, so that they get probability 0
    and no gradient; None: every action legal."""
    return logits if legal is None else torch.where(legal, logits, torch.full_like(logits, MASKED_LOGIT))


class CategoricalHead(nn.Module):
    """Discrete actions: logits from features; `legal` ([batch, actions] booleans, or None)
    restricts sampling and the loss alike to the legal actions."""

    def __init__(self, in_features: int, num_actions: int) -> None:
        super().__init__()
        self.logits = layer_init(nn.Linear(in_features, num_actions), gain=0.01)

    def sample(self, features: torch.Tensor, legal: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        log_probs = torch.log_softmax(masked_logits(self.logits(features), legal), dim=-1)
        actions = torch.multinomial(log_probs.exp(), 1)
        return actions.squeeze(-1), log_probs.gather(-1, actions).squeeze(-1)

    def log_prob_entropy(self, features: torch.Tensor, actions: torch.Tensor,
                         legal: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        log_probs = torch.log_softmax(masked_logits(self.logits(features), legal), dim=-1)
        chosen = log_probs.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
        entropy = -(log_probs.exp() * log_probs).sum(-1)
        return chosen, entropy


class GaussianHead(nn.Module):
    """Continuous actions: a diagonal Gaussian with a learned, state-independent log std."""

    def __init__(self, in_features: int, action_size: int, initial_log_std: float = 0.0) -> None:
        super().__init__()
        self.mean = layer_init(nn.Linear(in_features, action_size), gain=0.01)
        self.log_std = nn.Parameter(torch.full((action_size,), float(initial_log_std)))

    def _log_prob(self, mean: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        z = (actions - mean) * torch.exp(-self.log_std)
        return (-0.5 * z.pow(2) - self.log_std - _LOG_SQRT_2PI).sum(-1)

    def sample(self, features: torch.Tensor, legal: None = None) -> tuple[torch.Tensor, torch.Tensor]:
        mean = self.mean(features)
        actions = mean + torch.randn_like(mean) * self.log_std.exp()
        return actions, self._log_prob(mean, actions)

    def log_prob_entropy(self, features: torch.Tensor, actions: torch.Tensor,
                         legal: None = None) -> tuple[torch.Tensor, torch.Tensor]:
        mean = self.mean(features)
        entropy = (0.5 + _LOG_SQRT_2PI + self.log_std).sum().expand(mean.shape[0])
        return self._log_prob(mean, actions), entropy
