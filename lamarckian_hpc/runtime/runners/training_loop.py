"""The loop every in-process trainer runs: sample until a policy's batch is full, update that
policy's learner on it, and let the copy it samples with take the new weights.

The serial trainer runs it to the end of a run and reports after each update; a PBT or EMOGI
member runs it an interval at a time and scores itself; members in lockstep run its halves, so
that one batched step updates them together; the serial multi-agent trainer runs it over several
policies (one learner each, from `multiagent.policies.MultiPolicyLearner`), and the league's
learners run that one against their opponents. Keeping the loop in one place is what makes a
member of a population learn exactly as a training run of its config does, and an algorithm the
serial trainer runs run in a population too. (The distributed trainer's learners get their
batches from actors instead.)
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ...config import RunConfig
from ...mdp import EpisodeResult, ExperienceBatch, ExperienceBuffer, Sampler
from ...rl.learner import LearnerBase
from ..actor.sides import make_sampling_side
from ..algorithms import make_learner
from ..run_shape import spaces_of, steps_per_update


class LoopSampling(Protocol):
    """A sampling side (`sampling.SamplingSide`, `multiagent_sampling.MultiAgentSamplingSide`)."""

    sampler: Sampler

    @property
    def experiences(self) -> dict[str, ExperienceBuffer]: ...

    def sample_ready(self, batch_steps: int) -> list[str]: ...

    def load_policy_weights(self, policy_id: str, weights: Mapping[str, np.ndarray]) -> None: ...

    def set_epsilon(self, epsilon: float) -> None: ...

    def close(self) -> None: ...


@dataclass
class SampledBatches:
    """The batches of the policies that filled one, and what happened while sampling them."""

    batches: dict[str, ExperienceBatch]
    completed: list[EpisodeResult]  # episodes that ended while sampling (every policy's)
    env_frames: int                 # env frames sampled for them
    seconds: float                  # wall time the sampling took

    @property
    def experience(self) -> ExperienceBatch:
        """The batch of a one-policy loop."""
        (batch,) = self.batches.values()
        return batch


class TrainingLoop:
    def __init__(self, learners: Mapping[str, LearnerBase], sampling: LoopSampling, batch_steps: int,
                 spaces: tuple = (), shared_layers: bool = False) -> None:
        """`learners`: one per trained policy, keyed like the sampling side's policies;
        `batch_steps`: the steps a policy's batch holds before it is updated; `shared_layers`: the
        policies share layers, so an update of one changes every one's sampling copy."""
        self.learners = dict(learners)
        self.sampling = sampling
        self.batch_steps = batch_steps
        self.shared_layers = shared_layers
        self.spaces = spaces  # observation and action space of the environment, when known
        for policy_id in self.learners:
            self.sync(policy_id)

    @classmethod
    def of_run(cls, config: RunConfig) -> TrainingLoop:
        """The loop of a single-policy run's config: its algorithm's learner and a sampling side
        that acts with a copy of the policy. That copy runs on the CPU, torch-free for an MLP, as
        an actor does: a batch of a few observations costs a fraction of torch's per-call overhead
        in numpy (and a GPU round trip more)."""
        spaces = spaces_of(config)
        sampling = make_sampling_side(config, config.seed)
        return cls({sampling.policy_id: make_learner(config, *spaces)}, sampling, steps_per_update(config), spaces)

    @property
    def learner(self) -> LearnerBase:
        """The learner of a one-policy loop."""
        (learner,) = self.learners.values()
        return learner

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

    def sample(self) -> SampledBatches:
        """Tick the environments until a trained policy's batch is full; the full ones."""
        start, frames_before = time.monotonic(), self.env_frames
        ready = self.sampling.sample_ready(self.batch_steps)
        batches = {policy_id: self.sampling.experiences[policy_id].take() for policy_id in ready}
        completed = self.sampling.sampler.take_completed()
        return SampledBatches(batches, completed, self.env_frames - frames_before, time.monotonic() - start)

    def update(self, batches: Mapping[str, ExperienceBatch]) -> dict[str, dict[str, float]]:
        """One update of each policy's learner on its batch; sampling goes on with the new versions."""
        metrics = {}
        for policy_id, batch in batches.items():
            metrics[policy_id] = self.learners[policy_id].update(batch, self.env_frames)
            self.updated(policy_id)
        return metrics

    def updated(self, policy_id: str) -> None:
        """After an update of `policy_id` (here, or a batched step of several learners): its
        sampling copy takes the new weights and version, and the exploration schedule the learner
        sends (DQN's epsilon)."""
        for synced in self.learners if self.shared_layers else (policy_id,):
            self.sync(synced)
        meta = self.learners[policy_id].broadcast_meta(self.env_frames)
        if "epsilon" in meta:
            self.sampling.set_epsilon(meta["epsilon"])

    def sync(self, policy_id: str) -> None:
        """`policy_id`'s sampling copy takes its learner's weights and version."""
        learner = self.learners[policy_id]
        self.sampling.load_policy_weights(policy_id, learner.weights())
        self.sampling.sampler.policy_versions[policy_id] = learner.version

    def close(self) -> None:
        self.sampling.close()
