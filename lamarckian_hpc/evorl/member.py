"""One member of a PBT population: a PPO learner and its environments, trained an interval at a time.

A member runs the serial trainer's loop (`runtime.runners.training_loop`: sample a batch through the
asynchronous MDP interface, one PPO update) cut into intervals of env frames, with what PBT needs on
top: new hyperparameters between intervals, and its weights read out and written in as plain numpy
arrays, so that an exploit can copy them between processes (as Ray objects) without pickling torch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import get_args

import numpy as np
import torch

from ..config import PBTConfig, RunConfig, RuntimeConfig, StopConfig
from ..config.pbt import SearchedHyperparameter
from ..mdp import ExperienceBatch
from ..rl.learner import LearnerBase, load_weights
from ..runtime.actor.sampling import SamplingSide
from ..runtime.learner.episodes import RecentEpisodes
from ..runtime.run_shape import POLICY_ID
from ..runtime.runners.recording import recorded_answers
from ..runtime.runners.training_loop import TrainingLoop

OPTIMIZER_PREFIX = "optimizer/"
MODEL_PREFIX = "model/"
EPISODE_RETURNS = "episodes/returns"
EPISODE_LENGTHS = "episodes/lengths"
#: The PPO fields PBT may search, all saved in a member's checkpoint.
SEARCHED_NAMES: tuple[str, ...] = get_args(SearchedHyperparameter)


def member_seed(seed: int, slot: int) -> int:
    """Each slot gets its own seed, so members differ in weights and environments."""
    return seed * 10_007 + slot


def member_run_config(config: PBTConfig, slot: int) -> RunConfig:
    """The single-run config a member trains with (serial, CPU), before PBT sets hyperparameters."""
    return RunConfig(
        seed=member_seed(config.seed, slot), env=config.env, model=config.model, algorithm=config.ppo,
        runtime=RuntimeConfig(mode="serial", device="cpu", torch_threads=config.runtime.torch_threads),
        stop=StopConfig(total_env_steps=config.stop.total_env_frames, target_return=config.stop.target_return,
                        return_window=config.stop.return_window),
        storage=config.storage,
    )


@dataclass
class IntervalResult:
    """What one member did in one interval; `reached_seconds` counts from the start of the call
    of the process that trained it (so a driver can place it on its own clock)."""

    slot: int
    score: float  # mean return of the member's last return_window episodes; NaN before any episode
    episode_returns: list[float] = field(default_factory=list)  # episodes finished in this interval
    env_frames: int = 0  # the member's total
    wall_seconds: float = 0.0
    reached_seconds: float | None = None
    reached_frames: int | None = None
    updates: int = 0
    #: episodes picked for the run file (`storage.trajectories`), as `runtime.runners.recording.recorded_answers`
    recorded: list[dict] = field(default_factory=list)


class Member:
    def __init__(self, config: PBTConfig, slot: int) -> None:
        self._build(member_run_config(config, slot), slot, config.stop.return_window, config.stop.target_return)

    @classmethod
    def of_run(cls, run_config: RunConfig, slot: int, return_window: int = 20) -> Member:
        """A member that trains as `run_config` says (serial, CPU), without a return target: an
        EMOGI policy trained in lockstep with the others of its worker."""
        member = cls.__new__(cls)
        member._build(run_config, slot, return_window, None)
        return member

    def _build(self, run_config: RunConfig, slot: int, return_window: int, target_return: float | None) -> None:
        self.slot = slot
        self.run_config = run_config
        self.loop = TrainingLoop.of_run(run_config)
        self.episodes = RecentEpisodes(return_window)
        self.target_return = target_return
        self.reached = False

    @property
    def learner(self) -> LearnerBase:
        return self.loop.learner

    @property
    def sampling(self) -> SamplingSide:
        return self.loop.sampling

    def load_weights(self, weights: dict[str, np.ndarray]) -> None:
        """Start from these policy weights (an inherited policy); the optimizer starts fresh."""
        load_weights(self.learner.model, weights)
        self.loop.sync(POLICY_ID)

    @property
    def env_frames(self) -> int:
        return self.sampling.sampler.env_frames

    def set_hyperparameters(self, values: dict[str, float]) -> None:
        """Train from now on with these PPO fields (the learner reads them at every update)."""
        algorithm = self.run_config.algorithm.model_copy(update={k: float(v) for k, v in values.items()})
        self.run_config = self.run_config.model_copy(update={"algorithm": algorithm})
        self.learner.config = self.run_config  # the loop reads its config from the learner

    def hyperparameters(self, names: tuple[str, ...]) -> dict[str, float]:
        return {name: float(getattr(self.run_config.algorithm, name)) for name in names}

    def train_interval(self, frames: int, clock_start: float, stop_on_target: bool,
                       deadline: float | None = None) -> IntervalResult:
        """Train until `frames` more env frames were sampled (or the target is reached when
        `stop_on_target`, or the monotonic `deadline` passes)."""
        start = time.monotonic()
        end_frames = self.env_frames + frames
        result = IntervalResult(self.slot, float("nan"))
        while self.env_frames < end_frames:
            self.learner.update(self.sample(result), self.env_frames)  # `updated` syncs the sampling
            if self.updated(result, clock_start) and stop_on_target:
                break
            if deadline is not None and time.monotonic() >= deadline:
                break
        return self.finish(result, start)

    def sample(self, result: IntervalResult) -> ExperienceBatch:
        """One update's batch; the episodes that ended while sampling it count in `result`."""
        sampled = self.loop.sample()
        result.recorded += recorded_answers(self.episodes.count, sampled.completed, self.env_frames)
        self.episodes.add((r.episode_return for r in sampled.completed), (r.length for r in sampled.completed))
        result.episode_returns += [float(r.episode_return) for r in sampled.completed]
        return sampled.experience

    def updated(self, result: IntervalResult, clock_start: float) -> bool:
        """After an update of the learner: sample with the new version; True when this update
        made the member reach the target."""
        self.loop.updated(POLICY_ID)
        result.updates += 1
        if self.reached or not self.episodes.reached(self.target_return):
            return False
        self.reached = True
        result.reached_seconds = time.monotonic() - clock_start
        result.reached_frames = self.env_frames
        return True

    def finish(self, result: IntervalResult, start: float) -> IntervalResult:
        mean = self.episodes.mean_return
        result.score = float("nan") if mean is None else mean
        result.env_frames = self.env_frames
        result.wall_seconds = time.monotonic() - start
        return result

    def state(self) -> dict[str, np.ndarray]:
        """Weights, Adam moments and the recent episodes (they describe these weights), as arrays."""
        arrays = {MODEL_PREFIX + name: tensor.detach().cpu().numpy().copy()
                  for name, tensor in self.learner.model.state_dict().items()}
        for index, slots in self.learner.optimizer.state_dict()["state"].items():
            for key, value in slots.items():
                arrays[f"{OPTIMIZER_PREFIX}{index}/{key}"] = torch.as_tensor(value).detach().cpu().numpy().copy()
        arrays[EPISODE_RETURNS] = np.array(self.episodes.returns, dtype=np.float64)
        arrays[EPISODE_LENGTHS] = np.array(self.episodes.lengths, dtype=np.int64)
        return arrays

    def load_state(self, arrays: dict[str, np.ndarray]) -> None:
        """Become a copy of the member whose `state()` this is (hyperparameters are set separately).
        The copy has not reached the target itself until its own episodes say so; the slot's count
        of finished episodes goes on (it numbers the slot's recorded episodes)."""
        count = self.episodes.count
        self.learner.model.load_state_dict({name[len(MODEL_PREFIX):]: torch.tensor(array)
                                            for name, array in arrays.items() if name.startswith(MODEL_PREFIX)})
        optimizer_state = self.learner.optimizer.state_dict()
        moments: dict[int, dict[str, torch.Tensor]] = {}
        for name, array in arrays.items():
            if name.startswith(OPTIMIZER_PREFIX):
                index, key = name[len(OPTIMIZER_PREFIX):].split("/")
                moments.setdefault(int(index), {})[key] = torch.tensor(array)
        optimizer_state["state"] = moments
        self.learner.optimizer.load_state_dict(optimizer_state)
        self.episodes = RecentEpisodes(self.episodes.window)
        self.episodes.add(arrays[EPISODE_RETURNS].tolist(), arrays[EPISODE_LENGTHS].tolist())
        self.episodes.count = count
        self.learner.version += 1
        self.loop.sync(POLICY_ID)

    def checkpoint(self) -> dict:
        """What this member carries across a resume, as arrays and numbers: `state()` (weights, Adam
        moments, recent episodes), its policy version, env frames, episode count, whether it reached
        the target, the learner's random generator and its searched hyperparameters. Environments
        are not saved: a restored member starts fresh episodes, as `train --resume` does."""
        return {"arrays": self.state(), "version": self.learner.version, "env_frames": self.env_frames,
                "episodes_count": self.episodes.count, "reached": self.reached,
                "rng": self.learner.rng.bit_generator.state,
                "hyperparameters": self.hyperparameters(SEARCHED_NAMES)}

    def restore(self, state: dict) -> None:
        """Become the member whose `checkpoint()` this is."""
        self.load_state(state["arrays"])
        self.episodes.count = int(state["episodes_count"])
        self.reached = bool(state["reached"])
        self.learner.rng.bit_generator.state = state["rng"]
        self.learner.version = int(state["version"])
        self.loop.sync(POLICY_ID)
        self.sampling.sampler.env_frames = int(state["env_frames"])
        self.set_hyperparameters(state["hyperparameters"])

    def close(self) -> None:
        self.loop.close()
