"""The serial trainer: sampling and PPO learning in one process.

It is the reference runtime: everything runs in this process, so a debugger and a profiler see
the whole run, and a distributed runtime must learn as well as this one does for a fixed seed.
The loop has two phases per update, sampling a batch through the asynchronous MDP interface and
one PPO update, and reports to observers after each.
"""

from __future__ import annotations

import socket
import time
from typing import Sequence

import torch

from ..config import RunConfig
from .algorithms import rl_algorithm
from .checkpoint import TrainingCheckpoint, TrainingProgress
from .episodes import RecentEpisodes
from .learner import make_learner
from .observers import TrainObserver, TrainResult, UpdateReport
from .recording import RecordedEpisodes
from .sampling import make_sampling_side, spaces_of, steps_per_update

class SerialTrainer:
    def __init__(self, config: RunConfig, observers: Sequence[TrainObserver] = ()) -> None:
        self.config = config
        self.observers = list(observers)
        if not rl_algorithm(config).serial:
            raise ValueError(f"{config.algorithm.name} needs actor processes that compute gradients: "
                             "use runtime.mode=ray")
        torch.set_num_threads(config.runtime.torch_threads)
        self.spaces = spaces_of(config)
        self.learner = make_learner(config, *self.spaces)
        # Sampling runs its own copy of the policy on the CPU, torch-free for an MLP, as an actor
        # does: a batch of a few observations costs a fraction of torch's per-call overhead in
        # numpy (and a GPU round trip more). It takes the learner's weights after every update.
        self.sampling = make_sampling_side(config, config.seed)
        self.sampler, self.experience = self.sampling.sampler, self.sampling.experience
        self._sync_sampling()
        self.progress = TrainingProgress(RecentEpisodes(config.stop.return_window))
        self.recorded = RecordedEpisodes(self.sampling.policy_id)

    def checkpoint(self) -> TrainingCheckpoint:
        self.progress.env_frames = self.sampler.env_frames
        return TrainingCheckpoint.of(self.progress, self.learner.state_dict())

    def restore(self, checkpoint: TrainingCheckpoint) -> None:
        """Continue from `checkpoint`: same policy, optimizer, counters; environments start afresh."""
        self.learner.load_state_dict(checkpoint.learner)
        self.progress = checkpoint.progress(self.config.stop.return_window)
        self.sampler.env_frames = checkpoint.env_frames
        self._sync_sampling()

    def _sync_sampling(self) -> None:
        """The sampling policy takes the learner's weights and version."""
        self.sampling.load_weights(self.learner.weights())
        self.sampler.policy_versions[self.sampling.policy_id] = self.learner.version

    def train(self) -> TrainResult:
        batch_size, stop, progress = steps_per_update(self.config), self.config.stop, self.progress
        episodes = progress.episodes
        progress.started = time.monotonic()
        sampling_seconds = 0.0
        frames_at_start = self.sampler.env_frames
        self._sync_sampling()  # the learner's weights may have been set since (EMOGI's inherited policies)
        while self.sampler.env_frames < stop.total_env_steps:
            # Sampling phase: tick the MDPs until a batch of training steps is recorded.
            sampling_start = time.monotonic()
            frames_before = self.sampler.env_frames
            self.sampling.sample(batch_size)
            experience = self.experience.take()
            sampling_elapsed = time.monotonic() - sampling_start
            sampling_seconds += sampling_elapsed
            env_frames = progress.env_frames = self.sampler.env_frames
            completed = self.sampler.take_completed()
            returns = [r.episode_return for r in completed]
            self.recorded.add(episodes.count, returns, ((k, r.recorded) for k, r in enumerate(completed) if r.recorded),
                              actor=0, host=socket.gethostname())
            episodes.add(returns, (r.length for r in completed))

            # Learning phase: one PPO update on the batch.
            metrics = self.learner.update(experience, env_frames)
            self._sync_sampling()
            if "epsilon" in (meta := self.learner.broadcast_meta(env_frames)):
                self.sampling.set_epsilon(meta["epsilon"])
            progress.updates += 1
            progress.trained_steps += len(experience)
            metrics.update(episodes.metrics())
            metrics["env_errors"] = float(self.sampler.env_errors)
            metrics["env_frames_per_second"] = (env_frames - frames_before) / max(sampling_elapsed, 1e-9)
            metrics["trained_frames_per_second"] = len(experience) / max(time.monotonic() - sampling_start, 1e-9)
            wall_time = progress.wall_time
            report = UpdateReport(progress.updates, env_frames, progress.trained_steps, wall_time,
                                  self.learner.version, episodes.count, episodes.mean_return, metrics,
                                  self.recorded.take(env_frames, wall_time))
            if episodes.reached(stop.target_return) and progress.reached_at is None:
                progress.reached_at = env_frames
            for observer in self.observers:
                observer.on_update_end(report)
            if episodes.should_stop(stop, report.wall_time):
                break

        result = TrainResult(
            run_path=None,
            env_frames=self.sampler.env_frames,
            wall_time_seconds=progress.wall_time,
            updates=progress.updates, trained_steps=progress.trained_steps,
            episodes=episodes.count,
            recent_return_mean=episodes.mean_return,
            target_reached_at_frames=progress.reached_at,
            sampling_frames_per_second=(self.sampler.env_frames - frames_at_start) / max(sampling_seconds, 1e-9),
        )
        for observer in self.observers:
            observer.on_train_end(result)
        return result

    def close(self) -> None:
        self.sampling.close()
