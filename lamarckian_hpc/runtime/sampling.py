"""Builds the sampling side of a run: K environments, their training controllers and the batched
policy, in whichever process samples (the serial trainer's, or an actor's)."""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import torch

from ..config import DQNConfig, RunConfig
from ..mdp import ExperienceBuffer, GymMDP, Policy, Sampler, TrainingController, make_gym_env
from .inference import EpsilonGreedyPolicy, TorchPolicy
from .learner import build_model

POLICY_ID = "main"


@dataclass
class SamplingSide:
    sampler: Sampler
    experience: ExperienceBuffer
    model: torch.nn.Module
    policy: Policy
    policy_id: str = POLICY_ID
    max_consecutive_env_errors: int = 100

    def set_epsilon(self, epsilon: float) -> None:
        """Exploration rate of an epsilon-greedy policy (DQN); other policies have none."""
        if isinstance(self.policy, EpsilonGreedyPolicy):
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


def spaces_of(config: RunConfig) -> tuple[gym.Space, gym.Space]:
    """Observation and action space of the configured environment (made once and closed)."""
    env = make_gym_env(config.env.id, config.env.kwargs, config.env.max_episode_steps)
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def make_sampling_side(config: RunConfig, seed: int, model: torch.nn.Module | None = None) -> SamplingSide:
    """Envs, controllers and sampler; `model` is shared when given (the serial trainer's CPU model)."""
    mdps = make_env_mdps(config)
    observation_space, action_space = mdps[0].observation_space(None), mdps[0].action_space(None)
    if model is None:
        model = build_model(config, observation_space, action_space)
    policy: Policy
    if isinstance(config.algorithm, DQNConfig):
        policy = EpsilonGreedyPolicy(model, int(action_space.n), seed, config.algorithm.epsilon_start)
    else:
        policy = TorchPolicy(model)
    experience = ExperienceBuffer()
    sampler = Sampler(
        mdps,
        controller_factory=lambda env_index, agent_id: TrainingController(POLICY_ID, experience),
        policies={POLICY_ID: policy},
        seed=seed,
    )
    return SamplingSide(sampler, experience, model, policy,
                        max_consecutive_env_errors=config.runtime.max_consecutive_env_errors)
