"""The distributed trainer: one learner (this process) and N actor processes on Ray.

The learner publishes weights with a version number, takes experience as it arrives and measures
how stale it is (learner version - sampling version, per step). Synchronous sampling keeps only
steps of the current version (RLlib's PPO, staleness 0 at the update and at most 1 counted the
paper's way); asynchronous sampling takes whatever arrives, optionally dropping messages older than
`runtime.max_staleness`. A dead actor is restarted by Ray; its new process says hello, and the
learner counts the restart.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Sequence

import ray
import torch
import zmq

from ..config import RunConfig
from ..comm import ExperienceReceiver, WeightPublisher
from .episodes import RecentEpisodes
from .learner import PPOLearner
from .messages import EXPERIENCE, HELLO, KINDS, ActorExperience, concatenate, read_experience
from .observers import TrainObserver, TrainResult, UpdateReport
from .process_stats import TreeCpuMeter
from .ray_actors import init_ray, start_actors
from .sampling import spaces_of
from .trainer import METRIC_NAMES as SERIAL_METRIC_NAMES

log = logging.getLogger(__name__)

METRIC_NAMES: tuple[str, ...] = (
    *SERIAL_METRIC_NAMES, "actor_restarts", "cpu_utilization", "dropped_stale_steps", "malformed_messages",
)
RECEIVE_POLL_MS = 50


class DistributedTrainer:
    def __init__(self, config: RunConfig, observers: Sequence[TrainObserver] = ()) -> None:
        self.config = config
        self.observers = list(observers)
        torch.set_num_threads(config.runtime.torch_threads)
        self.learner = PPOLearner(config, *spaces_of(config))
        cores = os.cpu_count() or 1
        self.num_actors = config.runtime.num_actors or cores
        self.context = zmq.Context()
        self.publisher = WeightPublisher(self.context)
        self.receiver = ExperienceReceiver(self.context, KINDS)
        self.started_ray = init_ray(config, num_cpus=max(cores, self.num_actors))
        self.cpu_meter = TreeCpuMeter(cores)
        self.publisher.publish(self.learner.version, self.learner.weights())
        self.actors = start_actors(config, self.num_actors, self.publisher.address, self.receiver.address)
        self.hellos: dict[int, int] = {}
        self.actor_pids: dict[int, int] = {}
        self.dropped_stale_steps = 0

    @property
    def actor_restarts(self) -> int:
        return sum(max(0, count - 1) for count in self.hellos.values())

    def _next_experience(self) -> ActorExperience | None:
        """Serve late subscribers, then wait briefly for the next experience message."""
        self.publisher.serve_joins()
        message = self.receiver.receive(RECEIVE_POLL_MS)
        if message is None:
            return None
        if message.kind == HELLO:
            index = int(message.meta.get("actor_index", -1))
            self.hellos[index] = self.hellos.get(index, 0) + 1
            self.actor_pids[index] = int(message.meta.get("pid", -1))
            return None
        try:
            return read_experience(message)
        except (KeyError, ValueError, TypeError) as error:
            self.receiver.malformed += 1
            log.error("dropped an experience message from %s: %s", message.sender, error)
            return None

    def _accept(self, experience: ActorExperience) -> bool:
        versions = experience.batch.policy_versions
        if not len(versions):
            return False
        if self.config.runtime.sampling == "sync":
            fresh = bool((versions == self.learner.version).all())
        else:
            limit = self.config.runtime.max_staleness
            fresh = limit is None or self.learner.version - int(versions.min()) <= limit
        if not fresh:
            self.dropped_stale_steps += len(versions)
        return fresh

    def train(self) -> TrainResult:
        batch_size, stop = self.config.algorithm.batch_size, self.config.stop
        episodes = RecentEpisodes(stop.return_window)
        start = time.monotonic()
        env_frames = updates = 0
        reached_at: int | None = None
        while env_frames < stop.total_env_steps:
            batches, steps = [], 0
            wait_start = time.monotonic()
            frames_before = env_frames
            while steps < batch_size:
                experience = self._next_experience()
                if experience is None:
                    continue
                env_frames += experience.env_frames
                episodes.add(experience.episode_returns, experience.episode_lengths)
                if self._accept(experience):
                    batches.append(experience.batch)
                    steps += len(experience.batch)
            waited = time.monotonic() - wait_start

            update_start = time.monotonic()
            metrics = self.learner.update(concatenate(batches), env_frames)
            self.publisher.publish(self.learner.version, self.learner.weights())
            updates += 1
            metrics.update(episodes.metrics())
            metrics.update(
                env_frames_per_second=(env_frames - frames_before) / max(waited + time.monotonic() - update_start, 1e-9),
                trained_frames_per_second=steps / max(time.monotonic() - wait_start, 1e-9),
                actor_restarts=float(self.actor_restarts),
                cpu_utilization=self.cpu_meter.sample(),
                dropped_stale_steps=float(self.dropped_stale_steps),
                malformed_messages=float(self.receiver.malformed),
            )
            report = UpdateReport(updates, env_frames, time.monotonic() - start, self.learner.version,
                                  episodes.count, episodes.mean_return, metrics)
            for observer in self.observers:
                observer.on_update_end(report)
            if episodes.reached(stop.target_return):
                reached_at = env_frames
                break

        wall = time.monotonic() - start
        result = TrainResult(
            run_path=None, env_frames=env_frames, wall_time_seconds=wall, updates=updates,
            episodes=episodes.count, recent_return_mean=episodes.mean_return,
            target_reached_at_frames=reached_at, sampling_frames_per_second=env_frames / max(wall, 1e-9),
        )
        for observer in self.observers:
            observer.on_train_end(result)
        return result

    def close(self) -> None:
        for actor in self.actors:
            ray.kill(actor, no_restart=True)
        self.actors = []
        if self.started_ray:
            ray.shutdown()
        self.publisher.close()
        self.receiver.close()
        self.context.term()
