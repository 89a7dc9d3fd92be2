"""The serial trainer: sampling and learning in one process.

It is the reference runtime: everything runs in this process, so a debugger and a profiler see
the whole run, and a distributed runtime must learn as well as this one does for a fixed seed.
It runs the training loop (`training_loop`: sample a batch through the asynchronous MDP
interface, one update of the algorithm's learner) to the run's stop rule, and reports to
observers after each update.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Sequence

import torch

from ...config import RunConfig
from ..algorithms import rl_algorithm
from ..learner.checkpoint import TrainingCheckpoint, TrainingProgress
from ..learner.episodes import RecentEpisodes
from ..observers import TrainObserver, TrainResult, UpdateReport
from .recording import RecordedEpisodes
from .training_loop import TrainingLoop


class SerialTrainer:
    def __init__(self, config: RunConfig, observers: Sequence[TrainObserver] = ()) -> None:
        self.config = config
        self.observers = list(observers)
        if not rl_algorithm(config).serial:
            raise ValueError(f"{config.algorithm.name} needs actor processes that compute gradients: "
                             "use runtime.mode=ray")
        torch.set_num_threads(config.runtime.torch_threads)
        self.loop = TrainingLoop.of_run(config)
        self.learner, self.sampling, self.sampler = self.loop.learner, self.loop.sampling, self.loop.sampler
        self.spaces = self.loop.spaces
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
        self.loop.sync(self.sampling.policy_id)

    def train(self) -> TrainResult:
        stop, progress = self.config.stop, self.progress
        episodes = progress.episodes
        progress.started = time.monotonic()
        sampling_seconds = 0.0
        frames_at_start = self.sampler.env_frames
        # The learner's weights may have been set since (EMOGI's inherited policies).
        self.loop.sync(self.sampling.policy_id)
        while self.sampler.env_frames < stop.total_env_steps:
            sampled = self.loop.sample()
            sampling_seconds += sampled.seconds
            env_frames = progress.env_frames = self.sampler.env_frames
            returns = [r.episode_return for r in sampled.completed]
            self.recorded.add(episodes.count, returns,
                              ((k, r.recorded) for k, r in enumerate(sampled.completed) if r.recorded),
                              actor=0, host=socket.gethostname())
            episodes.add(returns, (r.length for r in sampled.completed))

            update_start = time.monotonic()
            metrics = self.loop.update(sampled.batches)[self.sampling.policy_id]
            progress.updates += 1
            progress.trained_steps += len(sampled.experience)
            metrics.update(episodes.metrics())
            metrics["env_errors"] = float(self.sampler.env_errors)
            metrics["env_frames_per_second"] = sampled.env_frames / max(sampled.seconds, 1e-9)
            metrics["trained_frames_per_second"] = len(sampled.experience) / max(
                sampled.seconds + time.monotonic() - update_start, 1e-9)
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
        self.loop.close()
