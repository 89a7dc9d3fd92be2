"""The loop every in-process trainer of one policy runs: sample a batch with the policy's own
copy, update the learner on it, and let that copy take the new weights.

The serial trainer runs it to the end of a run and reports after each update; a PBT or EMOGI
member runs it an interval at a time and scores itself; members in lockstep run its halves, so
that one batched step updates them together. Keeping the loop in one place is what makes a member
of a population learn exactly as a training run of its config does, and an algorithm the serial
trainer runs run in a population too. (The distributed trainer's learner gets its batches from
actors instead; multi-agent and league learners sample for several policies at once.)
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..config import RunConfig
from ..mdp import EpisodeResult, ExperienceBatch, Sampler
from ..rl.learner import LearnerBase
from .algorithms import make_learner
from .sampling import SamplingSide, make_sampling_side, spaces_of, steps_per_update


@dataclass
class SampledBatch:
    """One update's batch and what happened while sampling it."""

    experience: ExperienceBatch
    completed: list[EpisodeResult]  # episodes that ended while sampling it
    env_frames: int                 # env frames sampled for it
    seconds: float                  # wall time the sampling took


class TrainingLoop:
    def __init__(self, config: RunConfig) -> None:
        self.spaces = spaces_of(config)  # observation and action space of the environment
        self.learner: LearnerBase = make_learner(config, *self.spaces)
        # Sampling runs its own copy of the policy on the CPU, torch-free for an MLP, as an actor
        # does: a batch of a few observations costs a fraction of torch's per-call overhead in
        # numpy (and a GPU round trip more). It takes the learner's weights after every update.
        self.sampling: SamplingSide = make_sampling_side(config, config.seed)
        self.sync()

    @property
    def config(self) -> RunConfig:
        """The learner's config: a member's searched hyperparameters change it between updates."""
        return self.learner.config

    @property
    def sampler(self) -> Sampler:
        return self.sampling.sampler

    @property
    def env_frames(self) -> int:
        return self.sampling.sampler.env_frames

    def sample(self) -> SampledBatch:
        """Tick the environments until one update's batch of training steps is recorded."""
        start, frames_before = time.monotonic(), self.env_frames
        self.sampling.sample(steps_per_update(self.config))
        experience = self.sampling.experience.take()
        completed = self.sampling.sampler.take_completed()
        return SampledBatch(experience, completed, self.env_frames - frames_before, time.monotonic() - start)

    def update(self, experience: ExperienceBatch) -> dict[str, float]:
        """One update of the learner on `experience`; sampling goes on with the new version."""
        metrics = self.learner.update(experience, self.env_frames)
        self.updated()
        return metrics

    def updated(self) -> None:
        """After an update (here, or a batched step of several learners): the sampling policy takes
        the new weights and version, and the exploration schedule the learner sends (DQN's epsilon)."""
        self.sync()
        meta = self.learner.broadcast_meta(self.env_frames)
        if "epsilon" in meta:
            self.sampling.set_epsilon(meta["epsilon"])

    def sync(self) -> None:
        """The sampling policy takes the learner's weights and version."""
        self.sampling.load_weights(self.learner.weights())
        self.sampling.sampler.policy_versions[self.sampling.policy_id] = self.learner.version

    def close(self) -> None:
        self.sampling.close()
