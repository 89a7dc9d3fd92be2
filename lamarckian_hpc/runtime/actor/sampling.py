"""Builds the sampling side of a run: K environments, their training controllers and the batched
policy, in whichever process samples (the serial trainer's, or an actor's).

An actor that only acts samples with a torch-free policy (`numpy_policy`), so its process never
imports torch; torch is imported here only when sampling needs a torch model: one that computes
gradients (A3C's actors) or a CNN. Keep torch imports
out of this module's top level.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import gymnasium as gym
import numpy as np

from ... import envs  # noqa: F401  (registers the built-in lamarckian/ ids)
from ...comm import Message
from ...config import RunConfig
from ...mdp import (
    EpisodeResult,
    EpisodeSelector,
    ExperienceBatch,
    ExperienceBuffer,
    GymMDP,
    PolicyOutput,
    Sampler,
    TrainingController,
    make_gym_env,
)
from ..algorithms import rl_algorithm
from ..run_shape import POLICY_ID, recorded_every

if TYPE_CHECKING:
    import torch

class ActorPolicy(Protocol):
    """The sampler's `Policy` that also takes the learner's broadcast weights."""

    def __call__(self, observations: np.ndarray) -> PolicyOutput: ...

    def load_weights(self, weights: Mapping[str, np.ndarray]) -> None: ...


@dataclass
class SamplingSide:
    sampler: Sampler
    experience: ExperienceBuffer
    policy: ActorPolicy
    #: The torch network the policy runs, when it runs one; None for a torch-free policy.
    model: torch.nn.Module | None = None
    policy_id: str = POLICY_ID
    max_consecutive_env_errors: int = 100

    def load_weights(self, weights: Mapping[str, np.ndarray]) -> None:
        """Sample with the learner's broadcast weights (a dict named like the torch state_dict)."""
        self.policy.load_weights(weights)

    @property
    def experiences(self) -> dict[str, ExperienceBuffer]:
        """The buffer of each trained policy: the one, here (as the multi-agent side has several)."""
        return {self.policy_id: self.experience}

    def load_policy_weights(self, policy_id: str, weights: Mapping[str, np.ndarray]) -> None:
        self.load_weights(weights)

    def sample_ready(self, batch_steps: int) -> list[str]:
        """Tick until a trained policy holds `batch_steps`; the policies that do (the one)."""
        self.sample(batch_steps)
        return [self.policy_id]

    @property
    def observation_space(self) -> gym.Space:
        """Of the observations that travel to the learner."""
        return self.sampler.mdps[0].observation_space(None)

    def load_broadcast(self, message: Message) -> int:
        """The learner's weights message: the policy's weights and version; returns the version."""
        self.load_weights(message.arrays)
        self.sampler.policy_versions[self.policy_id] = message.policy_version
        return message.policy_version

    def take_experience(self) -> list[tuple[str, ExperienceBatch, list[EpisodeResult]]]:
        """(policy id, batch, finished episodes) of the one policy, as the multi-agent side hands
        back one per trained policy (`multiagent_sampling.MultiAgentSamplingSide`)."""
        batch = self.experience.take()
        return [(self.policy_id, batch, self.sampler.take_completed())]

    def set_epsilon(self, epsilon: float) -> None:
        """Exploration rate of an epsilon-greedy policy (DQN's, the only policies with an `epsilon`)."""
        if hasattr(self.policy, "epsilon"):
            self.policy.epsilon = epsilon

    def sample(self, num_steps: int) -> None:
        """Tick until the buffer holds `num_steps`; the buffer is counted every few ticks, not every tick."""
        num_envs = len(self.sampler.mdps)
        while (missing := num_steps - self.experience.num_steps) > 0:
            for _ in range(max(1, missing // num_envs)):
                self.sampler.tick()
            self.sampler.check_environments(self.max_consecutive_env_errors)

    def close(self) -> None:
        self.sampler.close()


def make_env_mdps(config: RunConfig) -> list[GymMDP]:
    env = config.env
    return [GymMDP(make_gym_env(env.id, env.kwargs, env.max_episode_steps)) for _ in range(env.num_envs)]


def needs_torch(config: RunConfig) -> bool:
    """Whether an actor of this run must sample with torch: its algorithm has no torch-free policy
    (A3C's actors compute gradients), or a CNN, which runs far faster in torch than in numpy."""
    return rl_algorithm(config).numpy_policy is None or config.model.kind == "cnn"


def numpy_policy(config: RunConfig, observation_space: gym.Space, action_space: gym.Space, seed: int) -> ActorPolicy:
    """The torch-free policy of an actor that only acts (freshly initialised until weights arrive)."""
    return rl_algorithm(config).build("numpy_policy", config, observation_space, action_space, seed)


def torch_policy(config: RunConfig, observation_space: gym.Space, action_space: gym.Space,
                 seed: int) -> tuple[ActorPolicy, torch.nn.Module]:
    """A policy on a torch network of its own."""
    from ..algorithms import build_model

    model = build_model(config, observation_space, action_space)
    return rl_algorithm(config).build("torch_policy", config, model, action_space, seed), model


def make_single_agent_side(config: RunConfig, seed: int, *, use_torch: bool = False) -> SamplingSide:
    """Envs, controllers and sampler of a single-agent run, with a policy of the side's own (it takes
    the learner's weights through `load_weights`): torch-free unless the run `needs_torch` or
    `use_torch` asks for it (the actor-footprint benchmark compares the two)."""
    mdps = make_env_mdps(config)
    observation_space, action_space = mdps[0].observation_space(None), mdps[0].action_space(None)
    policy: ActorPolicy
    model = None
    if not use_torch and not needs_torch(config):
        policy = numpy_policy(config, observation_space, action_space, seed)
    else:
        policy, model = torch_policy(config, observation_space, action_space, seed)
    experience = ExperienceBuffer()
    selector = EpisodeSelector(recorded_every(config))  # episodes kept for the run file
    sampler = Sampler(
        mdps,
        controller_factory=lambda env_index, agent_id: TrainingController(POLICY_ID, experience, selector),
        policies={POLICY_ID: policy},
        seed=seed,
    )
    return SamplingSide(sampler, experience, policy, model,
                        max_consecutive_env_errors=config.runtime.max_consecutive_env_errors)
