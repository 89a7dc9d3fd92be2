"""A trained policy back from its run: the run file's config, the network its algorithm samples
with, and the weights of the run's checkpoint, so that a finished run's policy can be exported or
evaluated without retraining. Only single-policy training runs (`train`) are loaded here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import torch

from ..config import ConfigError, RunConfig
from ..config.loading import build_config
from ..storage import open_run
from .algorithms import build_model
from .checkpoint import checkpoint_path, load_checkpoint
from .sampling import spaces_of


class TrainedPolicyError(ValueError):
    """The run's policy cannot be loaded (no run file, no checkpoint, not a training run); one line."""


@dataclass(frozen=True)
class TrainedPolicy:
    config: RunConfig
    model: torch.nn.Module  # on the CPU, in eval mode
    observation_space: gym.Space
    action_space: gym.Space
    policy_version: int


def load_trained_policy(run_path: str | Path, checkpoint: str | Path | None = None) -> TrainedPolicy:
    """The policy of the training run `run_path` (its .h5 file) with the weights of `checkpoint`
    (default: the `<run>.ckpt` beside it). Raises TrainedPolicyError with one line naming the file
    and what is wrong."""
    run_path = Path(run_path)
    checkpoint = checkpoint_path(run_path) if checkpoint is None else Path(checkpoint)
    if not run_path.is_file():
        raise TrainedPolicyError(f"error: no such run file: {run_path}")
    try:
        with open_run(run_path) as reader:
            tree = reader.config
    except (OSError, KeyError, ValueError) as error:
        raise TrainedPolicyError(f"error: {run_path} is not a readable run file: {error}") from None
    try:
        config = build_config(tree, str(run_path), RunConfig)
    except ConfigError:
        raise TrainedPolicyError(f"error: {run_path} is not a training run (its config is not a `train` "
                                 "config); policies are exported from training runs") from None
    if config.multiagent is not None:
        raise TrainedPolicyError(f"error: {run_path} is a multi-agent run; only single-policy training runs "
                                 "are supported here")
    try:
        state = load_checkpoint(checkpoint)
    except ValueError as error:
        raise TrainedPolicyError(f"error: {error}") from None
    observation_space, action_space = spaces_of(config)
    model = build_model(config, observation_space, action_space)
    try:
        model.load_state_dict(state.learner["model"])
    except (KeyError, RuntimeError) as error:
        reason = str(error).splitlines()[0]
        raise TrainedPolicyError(f"error: checkpoint {checkpoint} does not fit the network of {run_path}'s config: "
                                 f"{reason}") from None
    return TrainedPolicy(config, model.cpu().eval(), observation_space, action_space, state.policy_version)
