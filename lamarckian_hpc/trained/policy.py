"""A trained policy, from a run file and one of its checkpoints: the one way to get the network a
training run learned, for whatever uses it after the run (`lamarckian-hpc evaluate`, exports).

The run file holds the resolved config (`/config`), which says the environment, the algorithm and
the network; the checkpoint holds the learner's state, whose `model` entry is the network the
run's actors sampled with (the actor-critic of PPO, IMPALA and A3C, DQN's Q-network, SAC's actor).
So the network is rebuilt by the algorithm's entry (`algorithms.build_model`) and takes those
weights; nothing else of the learner (optimizer, replay buffer) is built.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from ..config import RunConfig, apply_overrides
from ..runtime.algorithms import RL_ALGORITHMS, build_model, rl_algorithm
from ..runtime.learner.checkpoint import CheckpointMismatch, check_fits, load_checkpoint, resolve_checkpoint
from ..runtime.run_shape import spaces_of
from ..storage import RunFileReadError, open_run

if TYPE_CHECKING:
    import torch


class TrainedPolicyError(ValueError):
    """No policy can be loaded from what was given (no run file, no checkpoint, not a training run);
    the message is one line."""


@dataclass
class TrainedPolicy:
    """A training run's network with a checkpoint's weights, in evaluation mode, on the CPU."""

    config: RunConfig
    model: torch.nn.Module
    observation_space: gym.Space
    action_space: gym.Space
    policy_version: int
    checkpoint: Path | None = None  # where the weights came from; None for a network built here

    @functools.cached_property
    def greedy(self) -> torch.nn.Module:
        """The algorithm's deterministic policy on `model` (models/greedy.py), as export writes it."""
        return rl_algorithm(self.config).build("greedy", self.model).eval()

    def act(self, observations: np.ndarray, sample: bool = False) -> np.ndarray:
        """Actions for a batch of observations: the greedy ones (the most probable, the mean, the
        highest-valued), or with `sample` drawn from the policy's distribution with torch's
        generator (a Q-network has none: its greedy actions)."""
        import torch

        with torch.inference_mode():
            tensor = torch.from_numpy(np.asarray(observations, dtype=np.float32))
            if sample and hasattr(self.model, "act"):
                actions, _ = self.model.act(tensor)
            else:
                actions = self.greedy(tensor)[0]
        return actions.numpy()


def stored_config(run_path: Path) -> dict[str, Any]:
    """The config tree a run file stored; a TrainedPolicyError for a missing or unreadable file."""
    if not run_path.is_file():
        raise TrainedPolicyError(f"no such run file: {run_path}")
    try:
        with open_run(run_path) as reader:
            tree: Any = reader.config
    except RunFileReadError as error:
        raise TrainedPolicyError(str(error)) from None
    except (OSError, KeyError, ValueError) as error:
        raise TrainedPolicyError(f"{run_path} is not a readable run file: {error}") from None
    return tree if isinstance(tree, dict) else {}


def _run_config(run_path: Path) -> RunConfig:
    """The config a training run stored, validated; a TrainedPolicyError for any other file."""
    tree = stored_config(run_path)
    name = tree.get("algorithm", {}).get("name")
    if name not in RL_ALGORITHMS:
        raise TrainedPolicyError(f"{run_path} is a {name or 'unknown'} run, not a training run: its policies are "
                                 "not in a training checkpoint (a PBT member: --member ID)")
    if tree.get("multiagent") is not None:
        raise TrainedPolicyError(f"{run_path} trains several policies (multiagent); only single-policy training "
                                 "runs can be loaded")
    try:
        return apply_overrides(tree, [], str(run_path), RunConfig)
    except ValueError as error:
        raise TrainedPolicyError(str(error).removeprefix("error: ")) from None


def load_trained_policy(run_path: str | Path, checkpoint: str | Path = "last") -> TrainedPolicy:
    """The policy of the training run at `run_path` with the weights of `checkpoint`: "last" (the
    newest, `<run>.ckpt`), "best" (`<run>.checkpoints/best.ckpt`) or a checkpoint file's path.
    Raises TrainedPolicyError (one line) when there is no such run, checkpoint or policy."""
    run_path = Path(run_path)
    config = _run_config(run_path)
    try:
        path = resolve_checkpoint(run_path, checkpoint)
        saved = load_checkpoint(path)
    except ValueError as error:
        raise TrainedPolicyError(str(error).splitlines()[0]) from None
    return policy_from_weights(config, saved.learner["model"], saved.policy_version, path)


def policy_from_weights(config: RunConfig, weights: Mapping[str, Any], policy_version: int,
                        source: Path) -> TrainedPolicy:
    """The network of `config`'s algorithm with `weights` (tensors or arrays named as its
    state_dict): how a policy kept elsewhere (a PBT member's state) becomes a TrainedPolicy."""
    import torch

    try:
        observation_space, action_space = spaces_of(config)
        model = build_model(config, observation_space, action_space)
        tensors = {name: torch.as_tensor(value) for name, value in weights.items()}
        check_fits(source, tensors, model.state_dict())
        model.load_state_dict(tensors)
    except CheckpointMismatch as error:
        raise TrainedPolicyError(str(error)) from None
    except (ValueError, KeyError, RuntimeError) as error:  # load_state_dict: RuntimeError for other shapes
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise TrainedPolicyError(f"{source}: {reason}") from None
    model.eval()
    return TrainedPolicy(config, model, observation_space, action_space, int(policy_version), Path(source))
