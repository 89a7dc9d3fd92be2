"""The policies an actor samples with, as numpy forward passes of the networks the learner trains.

An actor process that only acts needs no gradients, and torch is most of such a process: about
200 MB of its memory and a second of its start-up, to run a (64, 64) MLP. These policies compute
what `ActorCritic.act` and DQN's epsilon-greedy Q-network compute, from the learner's broadcast
weights (named like the torch state_dict, checked by `network_layout`), to float tolerance: a
matrix product may sum in another order than torch's. tests/test_numpy_policy.py holds them to
that. Image models (`model.kind='cnn'`) stay on torch, whose convolutions numpy cannot match in
speed. Must not import torch: actor processes import it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import gymnasium as gym
import numpy as np

from ...config import RunConfig
from ...mdp import PolicyOutput, legal_actions
from ...mdp.action_masks import MASKED_LOGIT
from .network_layout import NetworkLayout, actor_critic_layout, check_weights, initial_weights, q_network_layout

LEAKY_RELU_SLOPE = 0.01  # torch.nn.LeakyReLU's default negative_slope
_LOG_SQRT_2PI = np.float32(0.5 * math.log(2 * math.pi))

#: models/layers.py::ACTIVATIONS, elementwise on float32 arrays.
ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "leaky_relu": lambda x: np.maximum(x, x * np.float32(LEAKY_RELU_SLOPE)),
    "tanh": np.tanh,
    "relu": lambda x: np.maximum(x, np.float32(0.0)),
}


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Log-probabilities of each row's categories, shifted by the row's maximum so that exp cannot overflow."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def sample_categorical(logits: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One category per row of softmax(logits), by the Gumbel-max trick: the argmax of the logits
    plus standard Gumbel noise is category i with probability softmax(logits)_i (a logit of -inf
    is never drawn). Returns the actions and their log-probabilities. A handful of array calls
    where inverting the cumulative distribution took twice as many: for the few rows of an
    actor's tick, numpy's per-call cost is the whole cost (13 us against 4 for 8 rows)."""
    actions = (logits + rng.gumbel(size=logits.shape)).argmax(axis=-1)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    chosen = np.take_along_axis(shifted, actions[:, None], axis=-1)[:, 0]
    return actions, chosen - np.log(np.exp(shifted).sum(axis=-1))


def gaussian_log_prob(means: np.ndarray, log_std: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """Log-density of `actions` under diagonal Gaussians, as `models.heads.GaussianHead` computes it."""
    z = (actions - means) * np.exp(-log_std)
    return (-0.5 * z * z - log_std - _LOG_SQRT_2PI).sum(axis=-1)


def sample_gaussian(means: np.ndarray, log_std: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Unclipped actions (the environment adapter clips them to the action space, and the learner
    scores the unclipped ones) and their log-probabilities."""
    actions = means + rng.standard_normal(means.shape, dtype=np.float32) * np.exp(log_std)
    return actions, gaussian_log_prob(means, log_std, actions)


class NumpyNetwork:
    """The trunk and head of a `NetworkLayout` with loaded weights: flattened rows in, head outputs out."""

    def __init__(self, layout: NetworkLayout, activation: str, seed: int) -> None:
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; known: {sorted(ACTIVATIONS)}")
        self.layout = layout
        self.activation = ACTIVATIONS[activation]
        self.load_weights(initial_weights(layout, np.random.default_rng([seed, 1])))  # not the sampling stream

    def load_weights(self, weights: Mapping[str, np.ndarray]) -> None:
        """Take the learner's broadcast (copied: the arrays may be views of a received message)."""
        check_weights(weights, self.layout)
        layout = self.layout

        def own(name: str) -> np.ndarray:
            return np.array(weights[name], dtype=np.float32)

        self.trunk = [(own(dense.weight).T, own(dense.bias)) for dense in layout.trunk]
        self.head = (own(layout.head.weight).T, own(layout.head.bias))
        self.log_std = own(layout.log_std) if layout.log_std is not None else None

    def own(self, observations: np.ndarray) -> np.ndarray:
        """Flattened rows, only the columns the policy reads."""
        rows = observations.reshape(len(observations), -1).astype(np.float32, copy=False)
        return rows if self.layout.local_size is None else rows[:, : self.layout.local_size]

    def features(self, observations: np.ndarray) -> np.ndarray:
        rows = self.own(observations)
        for weight, bias in self.trunk:
            rows = self.activation(rows @ weight + bias)
        return rows

    def outputs(self, observations: np.ndarray) -> np.ndarray:
        """Logits, Gaussian means or Q-values: [batch, head size]; an illegal action's logit is
        MASKED_LOGIT when the rows carry a legal-action mask (`mdp.action_masks`)."""
        weight, bias = self.head
        outputs = self.features(observations) @ weight + bias
        if self.layout.mask_size:
            outputs = np.where(legal_actions(self.own(observations), self.layout.mask_size), outputs,
                               np.float32(MASKED_LOGIT))
        return outputs


class NumpyActorCriticPolicy(NumpyNetwork):
    """`ActorCritic.act` for the sampler's `Policy` protocol: sampled actions and their log-probabilities."""

    def __init__(self, layout: NetworkLayout, activation: str, seed: int) -> None:
        super().__init__(layout, activation, seed)
        self.rng = np.random.default_rng(seed)

    def log_probs(self, observations: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """Log-probabilities of given actions (what `ActorCritic.evaluate` returns first)."""
        outputs = self.outputs(observations)
        if self.log_std is not None:
            return gaussian_log_prob(outputs, self.log_std, actions.astype(np.float32, copy=False))
        return np.take_along_axis(log_softmax(outputs), actions.astype(np.int64)[:, None], axis=-1)[:, 0]

    def __call__(self, observations: np.ndarray) -> PolicyOutput:
        outputs = self.outputs(observations)
        if self.log_std is not None:
            return PolicyOutput(*sample_gaussian(outputs, self.log_std, self.rng))
        return PolicyOutput(*sample_categorical(outputs, self.rng))


class NumpyEpsilonGreedyPolicy(NumpyNetwork):
    """DQN's behaviour policy, as `inference.EpsilonGreedyPolicy`: the greedy action of the
    Q-network, a uniformly random one with probability epsilon (drawn the same way from `seed`)."""

    def __init__(self, layout: NetworkLayout, activation: str, seed: int, epsilon: float = 1.0) -> None:
        super().__init__(layout, activation, seed)
        self.num_actions = layout.head.out_features
        self.epsilon = epsilon
        self.rng = np.random.default_rng(seed)

    def __call__(self, observations: np.ndarray) -> PolicyOutput:
        greedy = self.outputs(observations).argmax(axis=1)
        explore = self.rng.random(len(greedy)) < self.epsilon
        actions = np.where(explore, self.rng.integers(0, self.num_actions, size=len(greedy)), greedy)
        return PolicyOutput(actions, np.zeros(len(actions), dtype=np.float32))


def actor_critic_policy(config: RunConfig, observation_space: gym.Space, action_space: gym.Space,
                        seed: int) -> NumpyActorCriticPolicy:
    """An actor-critic algorithm's torch-free policy (freshly initialised until weights arrive)."""
    return NumpyActorCriticPolicy(actor_critic_layout(observation_space, action_space, config.model),
                                  config.model.activation, seed)


def epsilon_greedy_policy(config: RunConfig, observation_space: gym.Space, action_space: gym.Space,
                          seed: int) -> NumpyEpsilonGreedyPolicy:
    """DQN's torch-free behaviour policy, at the schedule's first epsilon until the learner sends one."""
    return NumpyEpsilonGreedyPolicy(q_network_layout(observation_space, action_space, config.model),
                                    config.model.activation, seed, config.algorithm.epsilon_start)
