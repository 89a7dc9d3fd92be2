"""A run's recorded episodes (/trajectories) as a Minari dataset, the format offline-RL libraries
load (`minari.load_dataset`), so that what a trained agent did can be learned from elsewhere.

The dataset is written with Minari's own API (`minari.create_dataset_from_buffers`, HDF5 data
format, no JPEG re-encoding of images) under Minari's datasets folder (`MINARI_DATASETS_PATH`,
default ~/.minari/datasets). Each whole recorded episode is one Minari episode, in the run's
order: its actions, rewards, terminations and truncations are the recorded ones. Minari keeps
one more observation than steps (the one after the last step); the run file records only the
observations the policy acted on, so an episode's last observation is repeated in that place (the
dataset's description says so). The environment's spec (id, kwargs, step limit, from the run's
config) goes with the dataset, so `dataset.recover_environment()` makes the same environment.

Minari datasets are single-agent: multi-agent runs are refused with one line.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..config import ConfigError, RunConfig
from ..config.loading import build_config
from ..mdp import make_gym_env
from ..storage import open_run

INSTALL_HINT = "pip install -c constraints.txt -e '.[export]'"
DESCRIPTION = ("Episodes recorded by lamarckian-hpc run {run} ({algorithm} on {env_id}, policy versions "
               "{first} to {last}). Each episode's final observation repeats its last recorded one: runs record "
               "the observations actions were chosen on.")


class MinariExportError(ValueError):
    """The run's episodes cannot be written as a Minari dataset; one line naming why."""


@dataclass(frozen=True)
class MinariExport:
    dataset_id: str
    path: Path
    episodes: int
    steps: int

    def summary(self) -> str:
        return f"Minari dataset {self.dataset_id}: {self.episodes:,} episodes, {self.steps:,} steps in {self.path}"


def _run_config(run_path: Path, tree: dict[str, Any]) -> RunConfig:
    try:
        config = build_config(tree, str(run_path), RunConfig)
    except ConfigError:
        raise MinariExportError(f"error: {run_path} is not a training run; --minari exports the recorded episodes "
                                "of `train` runs") from None
    if config.multiagent is not None:
        raise MinariExportError(f"error: {run_path} is a multi-agent run; Minari datasets hold single-agent "
                                "episodes only")
    return config


def _episode_buffers(columns: dict[str, np.ndarray], lengths: np.ndarray, observation_dtype: np.dtype,
                     action_dtype: np.dtype) -> list[Any]:
    from minari.data_collector import EpisodeBuffer

    buffers = []
    for number, (first, length) in enumerate(zip(np.cumsum(lengths) - lengths, lengths)):
        steps = slice(int(first), int(first + length))
        observations = columns["observations"][steps].astype(observation_dtype, copy=False)
        buffers.append(EpisodeBuffer(
            id=number,
            observations=np.concatenate([observations, observations[-1:]]),
            actions=columns["actions"][steps].astype(action_dtype, copy=False),
            rewards=columns["rewards"][steps].astype(np.float64).tolist(),
            terminations=columns["terminated"][steps].tolist(),
            truncations=columns["truncated"][steps].tolist(),
        ))
    return buffers


def export_minari(run_path: str | Path, dataset_id: str) -> MinariExport:
    """Write the whole recorded episodes of the training run `run_path` as Minari dataset
    `dataset_id` (`(namespace/)name-v<version>`); MinariExportError with one line if it cannot."""
    run_path = Path(run_path)
    try:
        import minari
        from minari.dataset.minari_dataset import parse_dataset_id
        from minari.storage import get_dataset_path
    except ImportError as error:
        raise MinariExportError(f"error: --minari needs the export extra ({error.name} is missing): "
                                f"{INSTALL_HINT}") from None
    if not run_path.is_file():
        raise MinariExportError(f"error: no such run file: {run_path}")
    try:  # before Minari makes the dataset's folder, which a malformed id would leave behind
        parse_dataset_id(dataset_id)
    except ValueError:
        raise MinariExportError(f"error: --minari {dataset_id!r} is not a Minari dataset id: "
                                "(namespace/)name-v<version>, e.g. lamarckian/cartpole-ppo-v0") from None
    if Path(get_dataset_path(dataset_id)).exists():
        raise MinariExportError(f"error: --minari {dataset_id}: the dataset exists already at "
                                f"{get_dataset_path(dataset_id)}; choose another name or version")
    try:
        with open_run(run_path) as reader:
            config = _run_config(run_path, reader.config)
            policies = reader.trajectory_policies()
            if not policies:
                raise MinariExportError(f"error: {run_path} records no episodes "
                                        "(storage.trajectories.every_episodes was 0)")
            index = reader.episodes(policies[0])
            columns = reader.step_columns(("observations", "actions", "rewards", "terminated", "truncated"),
                                          policies[0], index)
    except (OSError, KeyError) as error:
        raise MinariExportError(f"error: {run_path} is not a readable run file: {error}") from None
    if not len(index["episode"]):
        raise MinariExportError(f"error: {run_path} has no whole recorded episode yet")
    env = make_gym_env(config.env.id, config.env.kwargs, config.env.max_episode_steps)
    try:
        buffers = _episode_buffers(columns, index["length"], np.dtype(env.observation_space.dtype),
                                   np.dtype(env.action_space.dtype))
        description = DESCRIPTION.format(run=run_path.stem, algorithm=config.algorithm.name, env_id=config.env.id,
                                         first=int(index["policy_version_first"].min()),
                                         last=int(index["policy_version_last"].max()))
        try:
            with warnings.catch_warnings():
                # Minari recommends an author, an email and a code link, which a run does not know.
                warnings.filterwarnings("ignore", message=r"`(code_permalink|author|author_email|eval_env)` is set")
                dataset = minari.create_dataset_from_buffers(
                    dataset_id, buffers, env=env, algorithm_name=f"lamarckian-hpc {config.algorithm.name}",
                    description=description, data_format="hdf5", jpeg_encoding=False)
        except ValueError as error:  # a dataset of that id written meanwhile
            raise MinariExportError(f"error: --minari {dataset_id}: {str(error).splitlines()[0]}") from None
    finally:
        env.close()
    return MinariExport(dataset_id, Path(get_dataset_path(dataset_id)), dataset.total_episodes, dataset.total_steps)
