"""DQN's loss and exploration schedule as functions of a minibatch and parameters."""

from __future__ import annotations

import torch
from torch import Tensor, nn


def dqn_loss(q_network: nn.Module, target_network: nn.Module, batch: dict[str, Tensor], gamma: float,
             double_q: bool = True) -> Tensor:
    """Huber loss of Q(s, a) against r + gamma * (1 - done) * Q_target(s', argmax) (double DQN) or max."""
    q_values = q_network(batch["observations"]).gather(1, batch["actions"].unsqueeze(1)).squeeze(1)
    with torch.no_grad():
        next_target = target_network(batch["next_observations"])
        if double_q:
            best = q_network(batch["next_observations"]).argmax(dim=1, keepdim=True)
            next_values = next_target.gather(1, best).squeeze(1)
        else:
            next_values = next_target.max(dim=1).values
        targets = batch["rewards"] + gamma * (1.0 - batch["dones"]) * next_values
    return nn.functional.smooth_l1_loss(q_values, targets)


def linear_epsilon(env_frames: int, start: float, end: float, decay_frames: int) -> float:
    fraction = min(1.0, env_frames / decay_frames)
    return start + fraction * (end - start)
