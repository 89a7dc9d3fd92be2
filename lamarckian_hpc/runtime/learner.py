"""The PPO learner of a run: model, optimizer, policy version and one update per batch.

Shared by the serial trainer and the distributed learner, so that both learn the same way from
the same batch; only where the batch comes from differs.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from ..config import RunConfig
from ..mdp import ExperienceBatch
from ..models import ActorCritic
from ..rl import build_rollout_batch, ppo_update

STALENESS_BINS = 8  # staleness_count_0 .. staleness_count_7, then staleness_count_8plus
STALENESS_METRICS: tuple[str, ...] = tuple(f"staleness_count_{k}" for k in range(STALENESS_BINS)) + (
    f"staleness_count_{STALENESS_BINS}plus",
)


def select_device(name: str) -> torch.device:
    """auto: the first GPU when there is one, else the CPU."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("runtime.device is 'cuda' but torch sees no GPU; use 'auto' or 'cpu'")
    return torch.device(name)


def staleness_metrics(staleness: np.ndarray) -> dict[str, float]:
    """Mean, max and a histogram (one metric per bin) of per-step staleness."""
    counts = np.bincount(np.minimum(staleness, STALENESS_BINS), minlength=STALENESS_BINS + 1)
    metrics = {"staleness_mean": float(staleness.mean()), "staleness_max": float(staleness.max())}
    metrics.update({name: float(count) for name, count in zip(STALENESS_METRICS, counts)})
    return metrics


class PPOLearner:
    def __init__(self, config: RunConfig, observation_space: gym.Space, action_space: gym.Space) -> None:
        self.config = config
        torch.manual_seed(config.seed)
        self.rng = np.random.default_rng(config.seed)
        self.device = select_device(config.runtime.device)
        self.model = ActorCritic(observation_space, action_space, config.model).to(self.device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.algorithm.learning_rate, eps=1e-5)
        self.version = 0

    def learning_rate(self, env_frames: int) -> float:
        algorithm = self.config.algorithm
        if not algorithm.anneal_learning_rate:
            return algorithm.learning_rate
        remaining = max(0.0, 1.0 - env_frames / self.config.stop.total_env_steps)
        return algorithm.learning_rate * max(remaining, 1e-3)

    def update(self, experience: ExperienceBatch, env_frames: int) -> dict[str, float]:
        """One PPO update on `experience`; the version goes up by one. Returns its diagnostics."""
        algorithm = self.config.algorithm
        learning_rate = self.learning_rate(env_frames)
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate
        staleness = self.version - experience.policy_versions
        batch = build_rollout_batch(experience, self.model, algorithm.gamma, algorithm.gae_lambda, self.device,
                                    algorithm.reward_scale)
        diagnostics = ppo_update(self.model, self.optimizer, batch, algorithm, self.rng)
        self.version += 1
        diagnostics["learning_rate"] = learning_rate
        diagnostics.update(staleness_metrics(staleness))
        return diagnostics

    def weights(self) -> dict[str, np.ndarray]:
        """The model's parameters and buffers as CPU arrays (what the broadcast sends)."""
        return {name: tensor.detach().cpu().numpy() for name, tensor in self.model.state_dict().items()}


def load_weights(model: torch.nn.Module, weights: dict[str, np.ndarray]) -> None:
    """Copy received arrays (possibly read-only views of a message) into a model."""
    model.load_state_dict({name: torch.tensor(array) for name, array in weights.items()})
