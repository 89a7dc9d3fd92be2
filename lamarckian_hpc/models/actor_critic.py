"""The policy and critic PPO trains, after the paper's Table III: the critic sits on top of the
policy's hidden layers (shared bottom) unless `share_trunk` is off, LeakyReLU by default.

A centralised critic (MAPPO, RLlib's centralized-critic example) is the case `global_state_size`
> 0: every row is [own observation | global state], the policy reads only the own part, so an
agent can act from its own observation alone, and the critic reads all of it during training. Its
trunk is then always its own (`share_trunk` does not apply: the critic's rows are wider).

A `MaskedDiscrete` action space (turn-based board games, `mdp.action_masks`) puts the legal-action
mask in the last entries of the own row: the network reads the row as it is, and the head gives
illegal actions probability 0 when sampling and in the loss's log-probabilities and entropy."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from ..config import ModelConfig
from .cnn import ConvEncoder
from .heads import CategoricalHead, GaussianHead
from .layers import FloatFlatten, fully_connected, layer_init, output_size


def _encoder(observation_space: gym.Space, config: ModelConfig) -> tuple[nn.Module, int]:
    if not isinstance(observation_space, gym.spaces.Box):
        raise ValueError(f"unsupported observation space {observation_space}; supported: Box (vectors or images)")
    shape = observation_space.shape
    if config.kind == "cnn":
        encoder = ConvEncoder(tuple(shape), config.activation, config.cnn_layers, config.cnn_precision)
        return encoder, encoder.output_size
    in_features = int(np.prod(shape))
    return nn.Sequential(FloatFlatten(), fully_connected(in_features, config.policy_hidden_sizes, config.activation)), \
        output_size(config.policy_hidden_sizes, in_features)


class ActorCritic(nn.Module):
    """`act` for sampling (no critic, no graph), `evaluate` for the loss."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config: ModelConfig,
                 global_state_size: int = 0) -> None:
        super().__init__()
        if global_state_size and (config.kind != "mlp" or len(observation_space.shape) != 1):
            raise ValueError("multiagent.centralized_critic: needs vector observations and model.kind='mlp', "
                             f"got model.kind={config.kind!r} and observations of shape {observation_space.shape}")
        self.trunk, features = _encoder(observation_space, config)
        #: Width of the own observation when rows also carry a global state; None otherwise.
        self.local_size: int | None = None
        self.critic_trunk: nn.Module | None = None
        critic_in = features
        if global_state_size:  # the critic cannot share the trunk: it reads wider rows
            self.local_size = int(observation_space.shape[0])
            critic_space = gym.spaces.Box(-np.inf, np.inf, (self.local_size + global_state_size,), np.float32)
            self.critic_trunk, critic_in = _encoder(critic_space, config)
        elif not config.share_trunk:
            self.critic_trunk, critic_in = _encoder(observation_space, config)
        self.critic = nn.Sequential(
            fully_connected(critic_in, config.critic_hidden_sizes, config.activation),
            layer_init(nn.Linear(output_size(config.critic_hidden_sizes, critic_in), 1), gain=1.0),
        )
        #: Entries of the legal-action mask at the end of the own row (0: every action always legal).
        self.mask_size = int(action_space.n) if getattr(action_space, "legal_actions_in_observation", False) else 0
        if self.mask_size and (config.kind != "mlp" or len(observation_space.shape) != 1):
            raise ValueError("legal-action masks need vector observations and model.kind='mlp', got "
                             f"model.kind={config.kind!r} and observations of shape {observation_space.shape}")
        if isinstance(action_space, gym.spaces.Discrete):
            self.head: CategoricalHead | GaussianHead = CategoricalHead(features, int(action_space.n))
        elif isinstance(action_space, gym.spaces.Box):
            self.head = GaussianHead(features, int(np.prod(action_space.shape)), config.initial_log_std)
        else:
            raise ValueError(f"unsupported action space {action_space}; supported: Discrete, Box")

    def own(self, observations: torch.Tensor) -> torch.Tensor:
        """What the policy reads: the own observation (rows without a global state pass unchanged)."""
        return observations if self.local_size is None else observations[..., : self.local_size]

    def legal(self, own: torch.Tensor) -> torch.Tensor | None:
        """[batch, actions] legal actions from own rows (`mdp.action_masks.legal_actions`); None without a mask."""
        if not self.mask_size:
            return None
        legal = own[..., -self.mask_size:] > 0.5
        return legal | ~legal.any(dim=-1, keepdim=True)

    def act(self, observations: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample actions and their log-probabilities."""
        own = self.own(observations)
        return self.head.sample(self.trunk(own), self.legal(own))

    def value(self, observations: torch.Tensor) -> torch.Tensor:
        features = self.trunk(observations) if self.critic_trunk is None else self.critic_trunk(observations)
        return self.critic(features).squeeze(-1)

    def evaluate(self, observations: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-probabilities and entropy of `actions`, and state values, in one pass over the trunk."""
        own = self.own(observations)
        features = self.trunk(own)
        log_probs, entropy = self.head.log_prob_entropy(features, actions, self.legal(own))
        critic_features = features if self.critic_trunk is None else self.critic_trunk(observations)
        return log_probs, entropy, self.critic(critic_features).squeeze(-1)
