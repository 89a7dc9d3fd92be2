"""Batched policy inference on torch networks for the sampler: numpy observations in, numpy
actions out. For A3C's actors (which compute gradients) and CNNs; a process that only acts on an
MLP (an actor, the serial trainer's sampling, a PBT member's) uses the torch-free `numpy_policy`."""

from __future__ import annotations

from collections.abc import Mapping

import gymnasium as gym
import numpy as np
import torch

from ...config import RunConfig
from ...mdp import PolicyOutput
from ...models import ActorCritic
from ...rl.learner import load_weights


class TorchPolicy:
    """Adapts an ActorCritic to the sampler's `Policy` protocol (no autograd, CPU or GPU)."""

    def __init__(self, model: ActorCritic, device: torch.device | str = "cpu") -> None:
        self.model = model
        self.device = torch.device(device)
        self.on_gpu = self.device.type != "cpu"

    def __call__(self, observations: np.ndarray) -> PolicyOutput:
        with torch.inference_mode():
            tensor = torch.from_numpy(observations.astype(np.float32, copy=False))
            if self.on_gpu:
                tensor = tensor.to(self.device, non_blocking=True)
            actions, log_probs = self.model.act(tensor)
        if self.on_gpu:
            actions, log_probs = actions.cpu(), log_probs.cpu()
        return PolicyOutput(actions.numpy(), log_probs.numpy())

    def load_weights(self, weights: Mapping[str, np.ndarray]) -> None:
        load_weights(self.model, weights)


class EpsilonGreedyPolicy:
    """DQN's behaviour policy: the greedy action of a Q-network, a random one with probability epsilon."""

    def __init__(self, q_network: torch.nn.Module, num_actions: int, seed: int, epsilon: float = 1.0) -> None:
        self.q_network = q_network
        self.num_actions = num_actions
        self.epsilon = epsilon
        self.rng = np.random.default_rng(seed)

    def __call__(self, observations: np.ndarray) -> PolicyOutput:
        with torch.inference_mode():
            greedy = self.q_network(torch.from_numpy(observations.astype(np.float32, copy=False))).argmax(dim=1).numpy()
        explore = self.rng.random(len(greedy)) < self.epsilon
        actions = np.where(explore, self.rng.integers(0, self.num_actions, size=len(greedy)), greedy)
        return PolicyOutput(actions, np.zeros(len(actions), dtype=np.float32))

    def load_weights(self, weights: Mapping[str, np.ndarray]) -> None:
        load_weights(self.q_network, weights)


def actor_critic_policy(config: RunConfig, model: ActorCritic, action_space: gym.Space, seed: int) -> TorchPolicy:
    """An actor-critic algorithm's policy on its torch network (which draws from torch's generator)."""
    return TorchPolicy(model)


def epsilon_greedy_policy(config: RunConfig, model: torch.nn.Module, action_space: gym.Space,
                          seed: int) -> EpsilonGreedyPolicy:
    """DQN's behaviour policy on its torch Q-network."""
    return EpsilonGreedyPolicy(model, int(action_space.n), seed, config.algorithm.epsilon_start)
