"""`lamarckian-hpc evaluate`: a trained policy plays N episodes of its run's environment, so that a
run is judged by what its policy does now, not by the returns it saw while it was still learning.

Episode k starts from `env.reset(seed=seed + k)`, and sampled actions (`sample`) draw from torch's
generator seeded with `seed`, so an evaluation is repeatable. A two-player game is played from
one seat, the other seat by a fixed policy (`AgainstPolicy`) or by the environment's own scripted
player, and its episodes are games: won with a positive return. The mean return comes with a 95%
confidence interval from Student's t distribution (`confidence_interval`): the episodes are
independent draws, and their number is usually small. Played episodes can be written to an HDF5
file in the run file's own layout (`/config`, `/trajectories/main/`, and one `episode_return`
metric row per episode), so that `replay`, `inspect` and the analysis read it as they read a run.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..mdp import make_gym_env
from ..runtime.run_shape import POLICY_ID
from ..runtime.runners.recording import trajectory_spec
from ..storage import RunWriter
from ..storage.trajectories import EpisodeRecord
from .policy import TrainedPolicy

AGENT_ID = "agent_0"
#: The one metric of an evaluation's file: each episode's return, a row per episode.
EVALUATION_METRIC = "episode_return"


@dataclass(frozen=True)
class Evaluation:
    """A trained policy's evaluation: the episodes it played from which checkpoint, and their mean
    return with the half-width of its 95% confidence interval (None for one episode)."""

    run: Path
    checkpoint: Path
    policy_version: int
    env_id: str
    seed: int
    sampled: bool        # actions drawn from the policy's distribution (False: greedy)
    returns: tuple[float, ...]
    lengths: tuple[int, ...]
    mean_return: float
    half_width: float | None
    record: Path | None  # the HDF5 file the episodes were written to
    #: The other player of a two-player game (None: a single-agent environment); an episode is a
    #: game, won with a positive return (more points won than lost), drawn with 0.
    opponent: str | None = None

    @property
    def wins_draws_losses(self) -> tuple[int, int, int]:
        returns = np.asarray(self.returns)
        return int((returns > 0).sum()), int((returns == 0).sum()), int((returns < 0).sum())


@dataclass
class PlayedEpisodes:
    """What the policy did: every episode's return and length, and the steps of those kept."""

    env_id: str
    returns: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    records: list[EpisodeRecord] = field(default_factory=list)


class AgainstPolicy:
    """A two-player parallel game seen from one seat, the other seat played greedily by `opponent`:
    the Gymnasium-style reset and step that `play_episodes` drives, so a game against another
    policy is played by the same loop as a single-agent environment."""

    def __init__(self, game: Any, seats: tuple[str, str], opponent: TrainedPolicy, env_id: str) -> None:
        self.game, (self.seat, self.other), self.opponent = game, seats, opponent
        self.env_id = env_id  # the game's, for the evaluation's summary
        self.action_space = game.action_space(self.seat)
        self._other_observation: np.ndarray | None = None

    def reset(self, seed: int | None = None) -> tuple[np.ndarray, dict]:
        observations, infos = self.game.reset(seed=seed)
        self._other_observation = observations[self.other]
        return observations[self.seat], infos[self.seat]

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        other = self.opponent.act(self._other_observation[None])[0]
        observations, rewards, terminated, truncated, infos = self.game.step({self.seat: action, self.other: other})
        self._other_observation = observations[self.other]
        return (observations[self.seat], float(rewards[self.seat]), bool(terminated[self.seat]),
                bool(truncated[self.seat]), infos[self.seat])

    def close(self) -> None:
        self.game.close()


def confidence_interval(returns: np.ndarray, level: float = 0.95) -> float | None:
    """Half-width of the `level` confidence interval of the mean of `returns`: t(level, n-1) * s / sqrt(n)
    with s the sample standard deviation; None for fewer than 2 episodes."""
    from scipy import stats

    values = np.asarray(returns, dtype=np.float64)
    if len(values) < 2:
        return None
    quantile = stats.t.ppf(0.5 + level / 2.0, len(values) - 1)
    return float(quantile * values.std(ddof=1) / np.sqrt(len(values)))


def play_episodes(policy: TrainedPolicy, episodes: int, seed: int, *, sample: bool = False,
                  keep_steps: bool = False, make_env: Callable[[], Any] | None = None) -> PlayedEpisodes:
    """Play `episodes` episodes of the run's environment (its id, kwargs and step limit), or of the
    one `make_env` makes (a game against another policy, `AgainstPolicy`), with `policy`;
    `keep_steps` keeps every step (observation acted on, action, reward) as an EpisodeRecord."""
    import torch

    config = policy.config
    env = make_env() if make_env is not None else make_gym_env(config.env.id, config.env.kwargs,
                                                                 config.env.max_episode_steps)
    low = getattr(env.action_space, "low", None)
    high = getattr(env.action_space, "high", None)
    torch.manual_seed(seed)
    played, frames, start = PlayedEpisodes(getattr(env, "env_id", config.env.id)), 0, time.monotonic()
    try:
        for number in range(episodes):
            observation, _ = env.reset(seed=seed + number)
            observations, actions, rewards = [], [], []
            terminated = truncated = False
            while not (terminated or truncated):
                action = policy.act(observation[None], sample)[0]
                if low is not None:  # as the training environments do (`mdp.GymMDP`)
                    action = np.minimum(np.maximum(action, low), high)
                if keep_steps:
                    observations.append(np.asarray(observation))
                    actions.append(np.asarray(action))
                observation, reward, terminated, truncated, _ = env.step(action)
                rewards.append(float(reward))
            frames += len(rewards)
            played.returns.append(float(np.sum(rewards)))
            played.lengths.append(len(rewards))
            if keep_steps:
                played.records.append(EpisodeRecord(
                    POLICY_ID, AGENT_ID, np.stack(observations), np.stack(actions), np.asarray(rewards, np.float32),
                    np.full(len(rewards), policy.policy_version, np.int64), bool(terminated), number,
                    played.returns[-1], 0, socket.gethostname(), frames, time.monotonic() - start))
    finally:
        env.close()
    return played


def write_episodes(path: str | Path, policy: TrainedPolicy, played: PlayedEpisodes, meta: dict) -> Path:
    """The played episodes as a run file: the run's config, `/trajectories/main/` and one
    `episode_return` row per episode (x: env frames so far)."""
    spec = trajectory_spec((policy.observation_space, policy.action_space), POLICY_ID)
    path = Path(path)
    with RunWriter(path, policy.config.to_json_dict(), (EVALUATION_METRIC,), meta, trajectories=[spec],
                   min_free_bytes=0) as writer:
        for record in played.records:
            writer.append(EVALUATION_METRIC, record.episode_return, env_frames=record.env_frames,
                          policy_version=policy.policy_version, wall_time=record.wall_time)
            writer.append_episode(record)
    return path


def evaluate_policy(policy: TrainedPolicy, run_path: Path, episodes: int, seed: int, *, sample: bool = False,
                    record: str | Path | None = None, opponent: str | None = None,
                    make_env: Callable[[], Any] | None = None) -> Evaluation:
    """Play and summarise: the mean return, its 95% confidence interval, the episodes' lengths, and
    the file the episodes went to (`record`); `opponent` names the other player of a game (the
    scripted Pong player of the environment, or the policy `make_env`'s game seats there)."""
    played = play_episodes(policy, episodes, seed, sample=sample, keep_steps=record is not None, make_env=make_env)
    returns = np.asarray(played.returns)
    written = None
    if record is not None:
        meta = {"evaluated_run": str(run_path), "checkpoint": str(policy.checkpoint), "seed": seed,
                "sampled_actions": sample}
        written = write_episodes(record, policy, played, meta)
    return Evaluation(run_path, policy.checkpoint, policy.policy_version, played.env_id, seed, sample,
                      tuple(played.returns), tuple(played.lengths), float(returns.mean()),
                      confidence_interval(returns), written, opponent)
