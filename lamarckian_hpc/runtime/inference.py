"""Batched policy inference for the sampler: numpy observations in, numpy actions out."""

from __future__ import annotations

import numpy as np
import torch

from ..mdp import PolicyOutput
from ..models import ActorCritic


class TorchPolicy:
    """Adapts an ActorCritic to the sampler's `Policy` protocol (no autograd, CPU or GPU)."""

    def __init__(self, model: ActorCritic, device: torch.device | str = "cpu") -> None:
        self.model = model
        self.device = torch.device(device)

    def __call__(self, observations: np.ndarray) -> PolicyOutput:
        with torch.inference_mode():
            tensor = torch.as_tensor(observations, dtype=torch.float32, device=self.device)
            actions, log_probs = self.model.act(tensor)
        return PolicyOutput(actions.cpu().numpy(), log_probs.cpu().numpy())
