"""SAC's learner: replay buffer, actor, twin critics and their targets, three optimizers, and
gradient steps in proportion to the frames that arrive (as `learner.DQNLearner`). The maths is
in `sac`; the entry that names both is `runtime.algorithms.RL_ALGORITHMS["sac"]`.

`model` is the actor alone: it is what actors sample with, so it is what `weights()` broadcasts;
the critics stay on the learner (and in its checkpoints)."""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from ..config import RunConfig, SACConfig
from ..mdp import ExperienceBatch
from ..mdp.staleness import staleness_metrics
from .adam import Adam
from .data_parallel import GradientReducer
from .learner import ReplayLearner
from .optim import GuardedSteps
from .sac import TwinQ, actor_loss, alpha_loss, critic_loss, soft_update


@contextmanager
def frozen(module: nn.Module) -> Iterator[None]:
    """No gradients for `module`'s parameters inside (the actor's step back-propagates through
    the critics, whose own gradients it does not need)."""
    parameters = list(module.parameters())
    for parameter in parameters:
        parameter.requires_grad_(False)
    try:
        yield
    finally:
        for parameter in parameters:
            parameter.requires_grad_(True)


class SACLearner(ReplayLearner):
    def __init__(self, config: RunConfig, observation_space: gym.Space, action_space: gym.Space,
                 model: nn.Module, *, reducer: GradientReducer | None = None) -> None:
        """`model`: the actor (`rl.sac.SquashedGaussianActor`); the critics are built here. `reducer`:
        only a group of one (SAC learns on one learner rank)."""
        super().__init__(config, observation_space, action_space, model, reducer=reducer)
        self.algorithm: SACConfig = config.algorithm  # type: ignore[assignment]
        algorithm = self.algorithm
        self.optimizer = Adam(self.model.parameters(), lr=algorithm.learning_rate)  # torch's default eps, as CleanRL
        self.critic = TwinQ(observation_space, action_space, config.model).to(self.device)
        self.critic_target = copy.deepcopy(self.critic)
        self.critic_target.requires_grad_(False)
        self.critic_optimizer = Adam(self.critic.parameters(), lr=algorithm.q_learning_rate)
        self.log_alpha = torch.tensor(math.log(algorithm.initial_alpha), device=self.device,
                                      requires_grad=algorithm.autotune_entropy)
        self.alpha_optimizer = (Adam([self.log_alpha], lr=algorithm.q_learning_rate) if algorithm.autotune_entropy
                                else None)
        self.target_entropy = (algorithm.target_entropy if algorithm.target_entropy is not None
                               else -float(np.prod(action_space.shape)))
        self.max_grad_norm = algorithm.max_grad_norm if algorithm.max_grad_norm is not None else math.inf

    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.detach().exp()

    def update(self, experience: ExperienceBatch, env_frames: int) -> dict[str, float]:
        """Add the batch to the replay buffer, then take the gradient steps its frames are owed."""
        algorithm = self.algorithm
        staleness = self.version - experience.policy_versions
        critic_steps = GuardedSteps(self.critic, self.critic_optimizer, self.max_grad_norm, sync_free=False)
        actor_steps = GuardedSteps(self.model, self.optimizer, self.max_grad_norm, sync_free=False)
        for _ in self.remember(experience, np.float32):
            self.gradient_step(critic_steps, actor_steps)
        self.version += 1
        metrics = {"learning_rate": algorithm.learning_rate, "alpha": float(self.alpha),
                   "epsilon": self.epsilon(), "replay_size": float(self.replay.size)}
        metrics.update(critic_steps.diagnostics())
        actor_diagnostics = actor_steps.diagnostics()
        metrics["nonfinite_steps"] += actor_diagnostics.pop("nonfinite_steps")
        metrics.update(actor_diagnostics)
        metrics.update(staleness_metrics(staleness))
        return metrics

    def gradient_step(self, critic_steps: GuardedSteps, actor_steps: GuardedSteps) -> None:
        """One Q step on a fresh minibatch and the target's Polyak step; every
        `policy_update_interval` Q steps, as many policy (and alpha) steps (CleanRL's delayed updates)."""
        algorithm = self.algorithm
        sample = self.replay.sample(algorithm.minibatch_size, self.rng)
        batch = {name: torch.from_numpy(array).to(self.device) for name, array in sample.items()}
        loss = critic_loss(self.critic, self.critic_target, self.model, batch, algorithm.gamma, self.alpha)
        if not critic_steps.step(loss, {"loss_value": loss}):
            return
        self.gradient_steps += 1
        if self.gradient_steps % algorithm.policy_update_interval == 0:
            for _ in range(algorithm.policy_update_interval):
                with frozen(self.critic):
                    loss, log_probs = actor_loss(self.model, self.critic, batch["observations"], self.alpha)
                    if not actor_steps.step(loss, {"loss_policy": loss, "entropy": -log_probs.detach().mean()}):
                        continue
                if self.alpha_optimizer is not None:
                    self.alpha_optimizer.zero_grad(set_to_none=True)
                    alpha_loss(self.log_alpha, log_probs, self.target_entropy).backward()
                    self.alpha_optimizer.step()
        soft_update(self.critic_target, self.critic, algorithm.tau)

    def epsilon(self) -> float:
        """Actors act uniformly at random (1) until learning starts, then with the policy (0)."""
        return 1.0 if self.replay.size < self.algorithm.learning_starts else 0.0

    def broadcast_meta(self, env_frames: int) -> dict[str, Any]:
        return {"epsilon": self.epsilon()}

    def state_dict(self) -> dict[str, Any]:
        """Critics, targets, optimizers and alpha beside the actor (the replay buffer is left out)."""
        return {**super().state_dict(), "critic": self.critic.state_dict(),
                "critic_target": self.critic_target.state_dict(),
                "critic_optimizer": self.critic_optimizer.state_dict(),
                "log_alpha": self.log_alpha.detach().clone(),
                "alpha_optimizer": None if self.alpha_optimizer is None else self.alpha_optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        with torch.no_grad():
            self.log_alpha.copy_(torch.as_tensor(state["log_alpha"]))
        if self.alpha_optimizer is not None and state["alpha_optimizer"] is not None:
            self.alpha_optimizer.load_state_dict(state["alpha_optimizer"])
