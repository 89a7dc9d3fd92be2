"""The serial trainer: sampling and PPO learning in one process.

It is the reference runtime: everything runs in this process, so a debugger and a profiler see
the whole run, and a distributed runtime must learn as well as this one does for a fixed seed.
The loop has two phases per update, sampling a batch through the asynchronous MDP interface and
one PPO update, and reports to observers after each.
"""

from __future__ import annotations

import copy
import time
from collections import deque
from typing import Sequence

import numpy as np
import torch

from ..config import RunConfig
from ..mdp import ExperienceBuffer, GymMDP, Sampler, TrainingController, make_gym_env
from ..models import ActorCritic
from ..rl import build_rollout_batch, ppo_update
from .inference import TorchPolicy
from .observers import TrainObserver, TrainResult, UpdateReport

POLICY_ID = "main"

#: Every metric this trainer writes; run files declare them up front.
METRIC_NAMES: tuple[str, ...] = (
    "episode_return_mean", "episode_length_mean", "episodes", "env_frames_per_second",
    "trained_frames_per_second", "loss_policy", "loss_value", "entropy", "approx_kl",
    "clip_fraction", "learning_rate", "staleness_mean", "staleness_max",
)


def select_device(name: str) -> torch.device:
    """auto: the first GPU when there is one, else the CPU."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("runtime.device is 'cuda' but torch sees no GPU; use 'auto' or 'cpu'")
    return torch.device(name)


class SerialTrainer:
    def __init__(self, config: RunConfig, observers: Sequence[TrainObserver] = ()) -> None:
        self.config = config
        self.observers = list(observers)
        torch.set_num_threads(config.runtime.torch_threads)
        torch.manual_seed(config.seed)
        self.rng = np.random.default_rng(config.seed)
        self.device = select_device(config.runtime.device)

        env = config.env
        mdps = [GymMDP(make_gym_env(env.id, env.kwargs, env.max_episode_steps)) for _ in range(env.num_envs)]
        probe = mdps[0]
        agent = probe.agent_ids()[0] if probe.agent_ids() else "agent_0"
        self.model = ActorCritic(probe.observation_space(agent), probe.action_space(agent), config.model).to(self.device)
        # Sampling runs on the CPU: a batch of a few observations is faster there than a GPU round trip.
        self.sampling_model = self.model if self.device.type == "cpu" else copy.deepcopy(self.model).cpu()
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.algorithm.learning_rate, eps=1e-5)
        self.experience = ExperienceBuffer()
        self.sampler = Sampler(
            mdps,
            controller_factory=lambda env_index, agent_id: TrainingController(POLICY_ID, self.experience),
            policies={POLICY_ID: TorchPolicy(self.sampling_model)},
            seed=config.seed,
        )
        self.policy_version = 0

    def _learning_rate(self, env_frames: int) -> float:
        algorithm = self.config.algorithm
        if not algorithm.anneal_learning_rate:
            return algorithm.learning_rate
        remaining = max(0.0, 1.0 - env_frames / self.config.stop.total_env_steps)
        return algorithm.learning_rate * max(remaining, 1e-3)

    def _sample(self, batch_size: int) -> None:
        """Tick until the buffer holds a batch; the buffer is counted every few ticks, not every tick."""
        num_envs = len(self.sampler.mdps)
        while (missing := batch_size - self.experience.num_steps) > 0:
            for _ in range(max(1, missing // num_envs)):
                self.sampler.tick()

    def train(self) -> TrainResult:
        algorithm, stop = self.config.algorithm, self.config.stop
        recent_returns: deque[float] = deque(maxlen=stop.return_window)
        recent_lengths: deque[int] = deque(maxlen=stop.return_window)
        start = time.monotonic()
        sampling_seconds = 0.0
        env_frames = episodes = updates = 0
        reached_at: int | None = None
        while env_frames < stop.total_env_steps:
            # Sampling phase: tick the MDPs until a batch of training steps is recorded.
            sampling_start = time.monotonic()
            frames_before = self.sampler.env_frames
            self._sample(algorithm.batch_size)
            experience = self.experience.take()
            sampling_elapsed = time.monotonic() - sampling_start
            sampling_seconds += sampling_elapsed
            batch_frames = self.sampler.env_frames - frames_before
            env_frames = self.sampler.env_frames
            for result in self.sampler.take_completed():
                recent_returns.append(result.episode_return)
                recent_lengths.append(result.length)
                episodes += 1

            # Learning phase: one PPO update on the batch.
            learning_rate = self._learning_rate(env_frames)
            for group in self.optimizer.param_groups:
                group["lr"] = learning_rate
            batch = build_rollout_batch(experience, self.model, algorithm.gamma, algorithm.gae_lambda, self.device,
                                        algorithm.reward_scale)
            staleness = self.policy_version - experience.policy_versions
            diagnostics = ppo_update(self.model, self.optimizer, batch, algorithm, self.rng)
            if self.sampling_model is not self.model:
                self.sampling_model.load_state_dict(self.model.state_dict())
            self.policy_version += 1
            self.sampler.policy_versions[POLICY_ID] = self.policy_version
            updates += 1
            iteration_seconds = time.monotonic() - sampling_start

            metrics = dict(diagnostics)
            metrics.update(
                learning_rate=learning_rate,
                env_frames_per_second=batch_frames / max(sampling_elapsed, 1e-9),
                trained_frames_per_second=len(batch) / max(iteration_seconds, 1e-9),
                episodes=float(episodes),
                staleness_mean=float(staleness.mean()),
                staleness_max=float(staleness.max()),
            )
            recent_mean = float(np.mean(recent_returns)) if recent_returns else None
            if recent_mean is not None:
                metrics["episode_return_mean"] = recent_mean
                metrics["episode_length_mean"] = float(np.mean(recent_lengths))
            report = UpdateReport(updates, env_frames, time.monotonic() - start, self.policy_version,
                                  episodes, recent_mean, metrics)
            for observer in self.observers:
                observer.on_update_end(report)
            if (stop.target_return is not None and reached_at is None and recent_mean is not None
                    and len(recent_returns) == stop.return_window and recent_mean >= stop.target_return):
                reached_at = env_frames
                break

        result = TrainResult(
            run_path=None,
            env_frames=env_frames,
            wall_time_seconds=time.monotonic() - start,
            updates=updates,
            episodes=episodes,
            recent_return_mean=float(np.mean(recent_returns)) if recent_returns else None,
            target_reached_at_frames=reached_at,
            sampling_frames_per_second=env_frames / max(sampling_seconds, 1e-9),
        )
        for observer in self.observers:
            observer.on_train_end(result)
        return result

    def close(self) -> None:
        self.sampler.close()
