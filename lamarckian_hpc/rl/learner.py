"""The learners of a run: model, optimizer, policy version and one update per batch.

Shared by the serial trainer and the distributed learner, so that both learn the same way from
the same batch; only where the batch comes from differs. Each algorithm's update itself is a
function in `rl/`; a learner holds its state (parameters, optimizer, replay buffer, version).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
import torch

from ..config import DQNConfig, RunConfig
from ..mdp import ExperienceBatch
from ..mdp.staleness import STALENESS_METRICS, staleness_metrics
from .adam import Adam
from .batch import build_rollout_batch
from .captured import CapturedSteps, why_not_captured
from .data_parallel import SINGLE_PROCESS, GradientReducer, global_staleness_metrics
from .device import choose_device
from .dqn import dqn_loss, linear_epsilon
from .impala import impala_update
from .optim import NONFINITE_STEPS, GuardedSteps
from .ppo import RolloutBatch, ppo_update
from .replay import ReplayBuffer, transitions_of

log = logging.getLogger(__name__)


def load_weights(model: torch.nn.Module, weights: Mapping[str, np.ndarray]) -> None:
    """Copy received arrays (possibly read-only views of a message) into a model."""
    model.load_state_dict({name: torch.tensor(array) for name, array in weights.items()})


class Learner(Protocol):
    version: int
    model: torch.nn.Module

    def update(self, experience: ExperienceBatch, env_frames: int) -> dict[str, float]: ...

    def weights(self) -> dict[str, np.ndarray]: ...

    def broadcast_meta(self, env_frames: int) -> dict[str, Any]: ...


def trained_steps(diagnostics: Mapping[str, float]) -> int:
    """The steps an update trained on, over every rank: its staleness histogram's total."""
    return int(sum(diagnostics.get(name, 0.0) for name in STALENESS_METRICS))


class LearnerBase:
    #: Whether several ranks can learn together (`reducer`): each update is then one update of the
    #: ranks' shards laid end to end (`rl.data_parallel`).
    data_parallel = False

    def __init__(self, config: RunConfig, observation_space: gym.Space, action_space: gym.Space,
                 model: torch.nn.Module, *, reducer: GradientReducer | None = None) -> None:
        """`model`: the network to train, built by the caller after seeding torch with the run's
        seed: the algorithm's own (`runtime.algorithms.make_learner`), or a multi-agent run's
        policies, which may share layers and read a global state. `reducer`: the group of learner
        ranks this one belongs to (default: alone); every rank calls `update` in lockstep with its
        own shard and gets the same diagnostics back."""
        self.reducer: GradientReducer = SINGLE_PROCESS if reducer is None else reducer
        if self.reducer.world_size > 1 and not self.data_parallel:
            raise ValueError(f"{type(self).__name__} learns on one learner rank, not {self.reducer.world_size}; "
                             "ppo and impala learn on several (runtime.learners)")
        self.config = config
        self.rng = np.random.default_rng(config.seed)
        self.device, self.device_reason = choose_device(config.runtime.device, config.model.kind, config.algorithm.name)
        log.info("learner on %s: %s", self.device, self.device_reason)  # and in the run file's /meta
        #: On a GPU: experience goes through pinned memory without waiting (`rl.device.to_device`);
        #: False takes the pageable copy (for measuring what the pinned one gains).
        self.pinned_transfers = True
        #: On a GPU: replay a recorded minibatch step where `why_not_captured` allows (PPO, IMPALA);
        #: False launches every step eagerly.
        self.captured_steps = True
        self._captured: CapturedSteps | None = None
        self._told_why_not = False
        self.model = model.to(self.device)
        # torch.optim.Adam's update, without the torch._dynamo import every torch optimizer makes (seconds).
        self.optimizer = Adam(self.model.parameters(), lr=config.algorithm.learning_rate, eps=1e-5)
        self.version = 0

    def learning_rate(self, env_frames: int) -> float:
        algorithm = self.config.algorithm
        if not getattr(algorithm, "anneal_learning_rate", False):
            return algorithm.learning_rate
        remaining = max(0.0, 1.0 - env_frames / self.config.stop.total_env_steps)
        return algorithm.learning_rate * max(remaining, 1e-3)

    def _set_learning_rate(self, env_frames: int) -> float:
        learning_rate = self.learning_rate(env_frames)
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate
        return learning_rate

    def captured(self) -> CapturedSteps | None:
        """The recorded minibatch steps, where they apply now (checked at every update: a
        data-parallel group may form after the learner is built); None: eager steps."""
        if not self.captured_steps or self.reducer.world_size > 1 or (
                self._captured is not None and self._captured.unavailable):
            return None
        reason = why_not_captured(self.model, self.optimizer)
        if reason is not None:
            if not self._told_why_not and self.device.type == "cuda":
                log.info("minibatch steps launched eagerly: %s", reason)
                self._told_why_not = True
            return None
        if self._captured is None:
            self._captured = CapturedSteps(self.model, self.optimizer)  # type: ignore[arg-type]
        return self._captured

    def weights(self) -> dict[str, np.ndarray]:
        """The model's parameters and buffers as CPU arrays (what the broadcast sends)."""
        return {name: tensor.detach().cpu().numpy() for name, tensor in self.model.state_dict().items()}

    def broadcast_meta(self, env_frames: int) -> dict[str, Any]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        """Everything an update depends on, so that a resumed run continues the same optimisation:
        parameters, optimizer moments, policy version and both random generators."""
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "version": self.version,
                "numpy_rng": self.rng.bit_generator.state, "torch_rng": torch.get_rng_state()}

    def updated(self, experience: ExperienceBatch, diagnostics: dict[str, float],
                learning_rate: float) -> dict[str, float]:
        """The last half of an update: the diagnostics with the learning rate and the staleness of
        `experience`, and a new version when the update trained any step (on any rank). An update
        of no steps left the weights as they were: a new version for them would make every sample
        in flight one version staler (all of them stale, with synchronous sampling) for nothing."""
        diagnostics["learning_rate"] = learning_rate
        diagnostics.update(global_staleness_metrics(self.reducer, self.version - experience.policy_versions))
        if trained_steps(diagnostics):
            self.version += 1
        return diagnostics

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.version = int(state["version"])
        self.rng.bit_generator.state = state["numpy_rng"]
        torch.set_rng_state(state["torch_rng"])


class PPOLearner(LearnerBase):
    """PPO on the actor-critic model: GAE on the critic, then clipped updates over minibatches. On
    a GPU each minibatch step is a replay of one recorded CUDA graph where it can be (`rl.captured`)."""

    data_parallel = True

    def update(self, experience: ExperienceBatch, env_frames: int) -> dict[str, float]:
        """One update on `experience`; the version goes up by one. Returns its diagnostics."""
        batch, learning_rate = self.ppo_batch(experience, env_frames)
        diagnostics = ppo_update(self.model, self.optimizer, batch, self.config.algorithm, self.rng, self.reducer,
                                 self.captured())
        return self.updated(experience, diagnostics, learning_rate)

    def ppo_batch(self, experience: ExperienceBatch, env_frames: int) -> tuple[RolloutBatch, float]:
        """The first half of a PPO update, for a caller that steps several learners at once
        (`rl.batched_ppo`): the learning rate is set for `env_frames`, and GAE runs on the critic."""
        algorithm = self.config.algorithm
        learning_rate = self._set_learning_rate(env_frames)
        batch = build_rollout_batch(experience, self.model, algorithm.gamma, algorithm.gae_lambda, self.device,
                                    algorithm.reward_scale, self.pinned_transfers)
        return batch, learning_rate


class ImpalaLearner(LearnerBase):
    """IMPALA on the same actor-critic model: V-trace targets correct for samples of older policies."""

    data_parallel = True

    def update(self, experience: ExperienceBatch, env_frames: int) -> dict[str, float]:
        learning_rate = self._set_learning_rate(env_frames)
        diagnostics = impala_update(self.model, self.optimizer, experience, self.config.algorithm, self.rng,
                                    self.device, self.reducer, self.pinned_transfers, self.captured())
        return self.updated(experience, diagnostics, learning_rate)


class A3CLearner(LearnerBase):
    """Applies gradients that actors computed; each application is a new policy version."""

    def apply_gradients(self, gradients: Sequence[np.ndarray], env_frames: int) -> dict[str, float]:
        learning_rate = self._set_learning_rate(env_frames)
        self.optimizer.zero_grad(set_to_none=True)
        if not all(np.isfinite(gradient).all() for gradient in gradients):
            return {"learning_rate": learning_rate, NONFINITE_STEPS: 1.0}
        for parameter, gradient in zip(self.model.parameters(), gradients, strict=True):
            # torch.tensor copies: the gradient is a read-only view of a received message.
            parameter.grad = torch.tensor(gradient, device=self.device).reshape(parameter.shape)
        self.optimizer.step()
        self.version += 1
        return {"learning_rate": learning_rate, NONFINITE_STEPS: 0.0}

    def update(self, experience: ExperienceBatch, env_frames: int) -> dict[str, float]:
        raise ValueError("a3c learns from gradients that actors send, not from experience")


class ReplayLearner(LearnerBase):
    """What an off-policy learner does with the frames that arrive (DQN, SAC): keep them in a replay
    buffer and, once it holds `learning_starts` transitions, owe `updates_per_frame` gradient steps
    per frame. The buffer is left out of checkpoints: it can be gigabytes, and refills within
    `learning_starts` frames."""

    def __init__(self, config: RunConfig, observation_space: gym.Space, action_space: gym.Space,
                 model: torch.nn.Module, *, reducer: GradientReducer | None = None) -> None:
        super().__init__(config, observation_space, action_space, model, reducer=reducer)
        self.replay = ReplayBuffer(config.algorithm.replay_capacity)
        self.gradient_steps = 0
        self._owed_steps = 0.0

    def remember(self, experience: ExperienceBatch, action_dtype: type = np.int64) -> Iterator[None]:
        """Add `experience`'s transitions (rewards scaled) to the buffer; then one item per gradient
        step its frames are owed (none before learning starts)."""
        algorithm = self.config.algorithm
        transitions = transitions_of(experience, action_dtype)
        transitions["rewards"] = transitions["rewards"] * np.float32(algorithm.reward_scale)
        self.replay.add(transitions)
        if self.replay.size >= algorithm.learning_starts:
            self._owed_steps += len(experience) * algorithm.updates_per_frame
            while self._owed_steps >= 1:
                self._owed_steps -= 1
                yield

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "gradient_steps": self.gradient_steps, "owed_steps": self._owed_steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.gradient_steps = int(state["gradient_steps"])
        self._owed_steps = float(state["owed_steps"])


class DQNLearner(ReplayLearner):
    """Replay buffer, target network and gradient steps in proportion to the frames that arrive."""

    def __init__(self, config: RunConfig, observation_space: gym.Space, action_space: gym.Space,
                 model: torch.nn.Module, *, reducer: GradientReducer | None = None) -> None:
        super().__init__(config, observation_space, action_space, model, reducer=reducer)
        self.algorithm: DQNConfig = config.algorithm  # type: ignore[assignment]
        self.target = copy.deepcopy(self.model)

    def update(self, experience: ExperienceBatch, env_frames: int) -> dict[str, float]:
        algorithm = self.algorithm
        staleness = self.version - experience.policy_versions
        steps = GuardedSteps(self.model, self.optimizer, algorithm.max_grad_norm, sync_free=False)
        for _ in self.remember(experience):
            sample = self.replay.sample(algorithm.minibatch_size, self.rng)
            batch = {name: torch.from_numpy(array).to(self.device) for name, array in sample.items()}
            loss = dqn_loss(self.model, self.target, batch, algorithm.gamma, algorithm.double_q)
            if steps.step(loss, {"loss_value": loss}):
                self.gradient_steps += 1
                if self.gradient_steps % algorithm.target_update_interval == 0:
                    self.target.load_state_dict(self.model.state_dict())
        self.version += 1
        metrics = {"learning_rate": algorithm.learning_rate, "epsilon": self.epsilon(env_frames),
                   "replay_size": float(self.replay.size), **steps.diagnostics()}
        metrics.update(staleness_metrics(staleness))
        return metrics

    def epsilon(self, env_frames: int) -> float:
        algorithm = self.algorithm
        return linear_epsilon(env_frames, algorithm.epsilon_start, algorithm.epsilon_end, algorithm.epsilon_decay_frames)

    def broadcast_meta(self, env_frames: int) -> dict[str, Any]:
        return {"epsilon": self.epsilon(env_frames)}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "target": self.target.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.target.load_state_dict(state["target"])
