"""Soft Actor-Critic (Haarnoja et al. 2018) for continuous actions, as CleanRL's
sac_continuous_action.py writes it: a squashed Gaussian actor, twin Q-networks with Polyak-averaged
targets, and a temperature alpha tuned so that the policy's entropy stays near a target.

The maths is here as functions of a minibatch (`critic_loss`, `actor_loss`, `alpha_loss`,
`soft_update`); the learner that owns the replay buffer and optimizers is
`sac_learner.SACLearner`, and `SACPolicy` is how a sampler acts with the actor.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

from ..config import ModelConfig, RunConfig
from ..mdp import PolicyOutput
from ..models.layers import ACTIVATIONS

#: The actor's log std is squashed into this range (CleanRL's bounds).
LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def box_action_space(action_space: gym.Space) -> gym.spaces.Box:
    """The action space, checked to be SAC's: a bounded one-dimensional Box."""
    if not isinstance(action_space, gym.spaces.Box) or len(action_space.shape) != 1:
        raise ValueError(f"sac needs continuous actions (a one-dimensional Box action space), got {action_space}; "
                         "use dqn, ppo or impala for discrete actions")
    if not (np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))):
        raise ValueError(f"sac squashes actions into the action space's bounds, which must be finite: {action_space}")
    return action_space


def _mlp_only(model: ModelConfig) -> None:
    if model.kind != "mlp":
        raise ValueError(f"sac builds MLP networks on flat observations: model.kind must be mlp, got {model.kind}")


def _mlp(sizes: Sequence[int], activation: str) -> nn.Sequential:
    """Linear layers between `sizes`, the activation after each (torch's default initialisation, as CleanRL)."""
    layers: list[nn.Module] = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(fan_in, fan_out), ACTIVATIONS[activation]()]
    return nn.Sequential(*layers)


def squashed_log_prob(noise: Tensor, log_std: Tensor, pre_tanh: Tensor, log_scale: Tensor) -> Tensor:
    """log pi(a | s) of a = tanh(u) * scale + bias, u = mean + std * noise, summed over action dimensions.

    The Gaussian's log density of u, less the log of the Jacobian |da/du| = scale * (1 - tanh(u)^2),
    where log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)) (finite for any u, unlike log(1 - y^2))."""
    gaussian = -0.5 * noise.square() - log_std - _HALF_LOG_2PI
    log_jacobian = 2.0 * (math.log(2.0) - pre_tanh - nn.functional.softplus(-2.0 * pre_tanh)) + log_scale
    return (gaussian - log_jacobian).sum(dim=-1)


class SquashedGaussianActor(nn.Module):
    """MLP -> (mean, log std); actions are tanh(mean + std * noise) scaled to the action bounds."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, model: ModelConfig) -> None:
        super().__init__()
        box = box_action_space(action_space)
        _mlp_only(model)
        observation_size = int(np.prod(observation_space.shape))
        action_size = box.shape[0]
        self.trunk = _mlp((observation_size, *model.policy_hidden_sizes), model.activation)
        self.mean = nn.Linear(model.policy_hidden_sizes[-1], action_size)
        self.log_std = nn.Linear(model.policy_hidden_sizes[-1], action_size)
        low, high = torch.as_tensor(box.low, dtype=torch.float32), torch.as_tensor(box.high, dtype=torch.float32)
        self.register_buffer("action_scale", (high - low) / 2.0)
        self.register_buffer("action_bias", (high + low) / 2.0)

    def distribution(self, observations: Tensor) -> tuple[Tensor, Tensor]:
        """Mean and log std of the Gaussian before the squashing; log std in [LOG_STD_MIN, LOG_STD_MAX]."""
        features = self.trunk(observations.flatten(1).float())
        log_std = torch.tanh(self.log_std(features))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1.0)
        return self.mean(features), log_std

    def sample(self, observations: Tensor, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """Reparameterised actions (differentiable in the parameters) and their log-probabilities."""
        mean, log_std = self.distribution(observations)
        noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
        pre_tanh = mean + log_std.exp() * noise
        actions = torch.tanh(pre_tanh) * self.action_scale + self.action_bias
        return actions, squashed_log_prob(noise, log_std, pre_tanh, self.action_scale.log())

    def act(self, observations: Tensor) -> tuple[Tensor, Tensor]:
        """`ActorCritic.act`'s interface: sampled actions and their log-probabilities."""
        return self.sample(observations)

    def deterministic(self, observations: Tensor) -> Tensor:
        """The squashed mean: the action to evaluate a trained policy with."""
        mean, _ = self.distribution(observations)
        return torch.tanh(mean) * self.action_scale + self.action_bias


class _StackedLinear(nn.Module):
    """`count` independent linear layers applied to `count` stacked inputs in one batched product."""

    def __init__(self, count: int, fan_in: int, fan_out: int) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(fan_in)  # nn.Linear's default initialisation, for weights and biases
        self.weight = nn.Parameter(torch.empty(count, fan_in, fan_out).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(count, 1, fan_out).uniform_(-bound, bound))

    def forward(self, inputs: Tensor) -> Tensor:  # (count, batch, fan_in) -> (count, batch, fan_out)
        return torch.baddbmm(self.bias, inputs, self.weight)


class TwinQ(nn.Module):
    """Two Q-networks Q_k(s, a) = MLP_k(concat(s, a)), evaluated together as batched products (one
    matrix product per layer for both instead of two); `forward` returns both, shape (2, batch)."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, model: ModelConfig,
                 count: int = 2) -> None:
        super().__init__()
        box = box_action_space(action_space)
        _mlp_only(model)
        sizes = (int(np.prod(observation_space.shape)) + box.shape[0], *model.critic_hidden_sizes, 1)
        self.count = count
        self.layers = nn.ModuleList(_StackedLinear(count, fan_in, fan_out)
                                    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]))
        self.activation = ACTIVATIONS[model.activation]()

    def forward(self, observations: Tensor, actions: Tensor) -> Tensor:
        inputs = torch.cat((observations.flatten(1).float(), actions), dim=1)
        hidden = inputs.expand(self.count, *inputs.shape)
        for layer in self.layers[:-1]:
            hidden = self.activation(layer(hidden))
        return self.layers[-1](hidden).squeeze(-1)


def critic_loss(critic: TwinQ, critic_target: TwinQ, actor: SquashedGaussianActor, batch: dict[str, Tensor],
                gamma: float, alpha: Tensor) -> Tensor:
    """Sum over both Q-networks of the mean squared error against the soft Bellman target
    r + gamma (1 - done) (min_k Q_target_k(s', a') - alpha log pi(a' | s')), a' ~ pi(s')."""
    with torch.no_grad():
        next_actions, next_log_probs = actor.sample(batch["next_observations"])
        next_values = critic_target(batch["next_observations"], next_actions).min(dim=0).values
        targets = batch["rewards"] + gamma * (1.0 - batch["dones"]) * (next_values - alpha * next_log_probs)
    q_values = critic(batch["observations"], batch["actions"])
    return (q_values - targets).square().mean(dim=1).sum()


def actor_loss(actor: SquashedGaussianActor, critic: TwinQ, observations: Tensor,
               alpha: Tensor) -> tuple[Tensor, Tensor]:
    """E[alpha log pi(a|s) - min_k Q_k(s, a)], a ~ pi(s) reparameterised; and the log-probs (for alpha)."""
    actions, log_probs = actor.sample(observations)
    q_values = critic(observations, actions).min(dim=0).values
    return (alpha * log_probs - q_values).mean(), log_probs


def alpha_loss(log_alpha: Tensor, log_probs: Tensor, target_entropy: float) -> Tensor:
    """-alpha (log pi + target entropy): alpha grows while the entropy -log pi is below the target."""
    return (-log_alpha.exp() * (log_probs.detach() + target_entropy)).mean()


@torch.no_grad()
def soft_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """Polyak averaging: target <- (1 - tau) target + tau source, for every parameter."""
    torch._foreach_lerp_(list(target.parameters()), list(source.parameters()), tau)


class SACPolicy:
    """The sampler's `Policy` on a SquashedGaussianActor, with a random generator of its own (each
    actor process explores with its own noise). While `epsilon` is 1 it acts uniformly at random
    instead (CleanRL's warm-up): the learner broadcasts epsilon 1 until its replay buffer holds
    `learning_starts` transitions, then 0 (DQN's broadcast channel for its exploration rate)."""

    def __init__(self, actor: SquashedGaussianActor, action_space: gym.Space, seed: int, epsilon: float = 1.0) -> None:
        box = box_action_space(action_space)
        self.actor = actor
        self.low, self.high = box.low.astype(np.float32), box.high.astype(np.float32)
        self.epsilon = epsilon
        self.rng = np.random.default_rng(seed)
        self.generator = torch.Generator().manual_seed(seed)

    def __call__(self, observations: np.ndarray) -> PolicyOutput:
        count = len(observations)
        if self.epsilon >= 1.0:
            actions = self.rng.uniform(self.low, self.high, size=(count, len(self.low))).astype(np.float32)
            return PolicyOutput(actions, np.zeros(count, dtype=np.float32))
        with torch.inference_mode():
            tensor = torch.from_numpy(observations.astype(np.float32, copy=False))
            actions, log_probs = self.actor.sample(tensor, self.generator)
        return PolicyOutput(actions.numpy(), log_probs.numpy())

    def load_weights(self, weights: Mapping[str, np.ndarray]) -> None:
        self.actor.load_state_dict({name: torch.tensor(array) for name, array in weights.items()})


def sac_policy(config: RunConfig, actor: SquashedGaussianActor, action_space: gym.Space, seed: int) -> SACPolicy:
    """The sampling policy of a run's config (its algorithm entry's `torch_policy`)."""
    return SACPolicy(actor, action_space, seed)
