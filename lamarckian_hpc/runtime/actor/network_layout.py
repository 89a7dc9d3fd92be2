"""The parameters of the torch networks in `models/` (state_dict names, shapes, initial gains),
known without torch.

A torch-free actor (`runtime/actor/numpy_policy.py`) receives the learner's weights as a dict named like
the torch state_dict. This module says which names and shapes that dict must hold for a model
config and a pair of spaces, so that weights that do not fit are refused with the names at fault
instead of being multiplied into nonsense. It mirrors `models/actor_critic.py`,
`models/q_network.py` and `models/layers.py::fully_connected`; tests/test_numpy_policy.py checks
that the two agree. Must not import torch: actor processes import it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from ...config import ModelConfig
from ...mdp import mask_size

HIDDEN_GAIN = math.sqrt(2.0)  # models/layers.py::layer_init's default
POLICY_HEAD_GAIN = 0.01  # CategoricalHead.logits, GaussianHead.mean
VALUE_HEAD_GAIN = 1.0  # the critic's output, QNetwork.head


@dataclass(frozen=True)
class Dense:
    """One torch.nn.Linear: `prefix.weight` [out, in] and `prefix.bias` [out]."""

    prefix: str
    in_features: int
    out_features: int
    gain: float

    @property
    def weight(self) -> str:
        return f"{self.prefix}.weight"

    @property
    def bias(self) -> str:
        return f"{self.prefix}.bias"

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {self.weight: (self.out_features, self.in_features), self.bias: (self.out_features,)}


@dataclass(frozen=True)
class NetworkLayout:
    """What an actor computes (`trunk` then `head`) and the rest of the state_dict, which it
    checks but never reads (the critic: only the learner evaluates it)."""

    in_features: int  # columns of a flattened observation row
    trunk: tuple[Dense, ...]  # an activation after each
    head: Dense  # logits, Gaussian means or Q-values
    log_std: str | None = None  # the Gaussian head's state-independent log std, [action_size]
    initial_log_std: float = 0.0
    unread: tuple[Dense, ...] = ()
    #: The policy reads only this many leading columns (a centralised critic's rows); None: all.
    local_size: int | None = None
    #: Entries of the legal-action mask at the end of the policy's columns (`mdp.action_masks`); 0: none.
    mask_size: int = 0

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Every state_dict name and shape of the torch network."""
        shapes: dict[str, tuple[int, ...]] = {}
        for dense in (*self.trunk, self.head, *self.unread):
            shapes.update(dense.shapes())
        if self.log_std is not None:
            shapes[self.log_std] = (self.head.out_features,)
        return shapes


def fully_connected(prefix: str, in_features: int, hidden_sizes: Sequence[int]) -> tuple[Dense, ...]:
    """`layers.fully_connected` in a Sequential named `prefix`: Linear at even indices, the
    activation at odd ones."""
    layers = []
    for index, size in enumerate(hidden_sizes):
        layers.append(Dense(f"{prefix}.{2 * index}", in_features, size, HIDDEN_GAIN))
        in_features = size
    return tuple(layers)


def _out(layers: tuple[Dense, ...], in_features: int) -> int:
    return layers[-1].out_features if layers else in_features


def _vector_size(observation_space: gym.Space, model: ModelConfig) -> int:
    if not isinstance(observation_space, gym.spaces.Box):
        raise ValueError(f"unsupported observation space {observation_space}; supported: Box (vectors or images)")
    if model.kind != "mlp":
        raise ValueError(f"a torch-free policy runs model.kind='mlp' only, not {model.kind!r} (CNN actors use torch)")
    return int(np.prod(observation_space.shape))


def actor_critic_layout(observation_space: gym.Space, action_space: gym.Space, model: ModelConfig,
                        global_state_size: int = 0) -> NetworkLayout:
    """`models.ActorCritic`: trunk = Sequential(Flatten, fully_connected), so its layers are
    `trunk.1.*`; critic = Sequential(fully_connected, Linear(…, 1)) on the trunk or its own."""
    in_features = _vector_size(observation_space, model)
    trunk = fully_connected("trunk.1", in_features, model.policy_hidden_sizes)
    features = _out(trunk, in_features)
    unread: tuple[Dense, ...] = ()
    critic_in = features
    if global_state_size:
        if len(observation_space.shape) != 1:
            raise ValueError(f"a centralised critic needs vector observations, got shape {observation_space.shape}")
        critic_trunk = fully_connected("critic_trunk.1", in_features + global_state_size, model.policy_hidden_sizes)
        unread, critic_in = critic_trunk, _out(critic_trunk, in_features + global_state_size)
    elif not model.share_trunk:
        unread = fully_connected("critic_trunk.1", in_features, model.policy_hidden_sizes)
        critic_in = _out(unread, in_features)
    critic = fully_connected("critic.0", critic_in, model.critic_hidden_sizes)
    unread += (*critic, Dense("critic.1", _out(critic, critic_in), 1, VALUE_HEAD_GAIN))
    local_size = in_features if global_state_size else None
    if isinstance(action_space, gym.spaces.Discrete):
        return NetworkLayout(in_features, trunk, Dense("head.logits", features, int(action_space.n), POLICY_HEAD_GAIN),
                             unread=unread, local_size=local_size, mask_size=mask_size(action_space))
    if isinstance(action_space, gym.spaces.Box):
        head = Dense("head.mean", features, int(np.prod(action_space.shape)), POLICY_HEAD_GAIN)
        return NetworkLayout(in_features, trunk, head, log_std="head.log_std", initial_log_std=model.initial_log_std,
                             unread=unread, local_size=local_size)
    raise ValueError(f"unsupported action space {action_space}; supported: Discrete, Box")


def q_network_layout(observation_space: gym.Space, action_space: gym.Space, model: ModelConfig) -> NetworkLayout:
    """`models.q_network.QNetwork`: trunk = Sequential(Flatten, fully_connected), head = Linear."""
    if not isinstance(action_space, gym.spaces.Discrete):
        raise ValueError(f"DQN needs discrete actions, got {action_space}")
    in_features = _vector_size(observation_space, model)
    trunk = fully_connected("trunk.1", in_features, model.policy_hidden_sizes)
    return NetworkLayout(in_features, trunk, Dense("head", _out(trunk, in_features), int(action_space.n),
                                                   VALUE_HEAD_GAIN))


def check_weights(weights: Mapping[str, np.ndarray], layout: NetworkLayout) -> None:
    """Raise ValueError, naming every unknown, missing and misshapen entry, unless `weights` holds
    exactly the layout's names with its shapes and a floating dtype."""
    expected = layout.shapes()
    unknown = sorted(set(weights) - set(expected))
    missing = sorted(set(expected) - set(weights))
    misshapen = [f"{name} {tuple(np.shape(weights[name]))} (expected {shape})" for name, shape in expected.items()
                 if name in weights and tuple(np.shape(weights[name])) != shape]
    not_float = [f"{name} ({np.asarray(weights[name]).dtype})" for name in expected
                 if name in weights and np.asarray(weights[name]).dtype.kind != "f"]
    problems = [f"{what}: {', '.join(names)}" for what, names in
                (("unknown", unknown), ("missing", missing), ("wrong shape", misshapen), ("not floating", not_float))
                if names]
    if problems:
        raise ValueError("the weights do not fit this policy's network; " + "; ".join(problems))


def initial_weights(layout: NetworkLayout, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A fresh network as `layers.layer_init` makes one (orthogonal weights times the layer's
    gain, zero biases), drawn from `rng`: what a policy samples with before weights arrive."""
    weights: dict[str, np.ndarray] = {}
    for dense in (*layout.trunk, layout.head, *layout.unread):
        weights[dense.weight] = orthogonal((dense.out_features, dense.in_features), dense.gain, rng)
        weights[dense.bias] = np.zeros(dense.out_features, np.float32)
    if layout.log_std is not None:
        weights[layout.log_std] = np.full(layout.head.out_features, layout.initial_log_std, np.float32)
    return weights


def orthogonal(shape: tuple[int, int], gain: float, rng: np.random.Generator) -> np.ndarray:
    """torch.nn.init.orthogonal_'s construction: QR of a Gaussian matrix, signs fixed by R's diagonal."""
    rows, cols = shape
    gaussian = rng.standard_normal((rows, cols) if rows >= cols else (cols, rows))
    q, r = np.linalg.qr(gaussian)
    q *= np.sign(np.diag(r))
    return (gain * (q if rows >= cols else q.T)).astype(np.float32)
