"""A crowd of agents doing a random walk, as a PettingZoo parallel environment (without pettingzoo).

benchmarks/scale/multiagent_inference.py's distributed mode gives it to the runtime's actor processes
by env id (`pettingzoo:benchmarks.scale.crowd_env`, importable wherever the checkout is installed), so that each actor acts
for its share of the agents: every agent observes 4 floats, picks one of 2 actions and acts every
tick; all agents are truncated together after `episode_ticks`. The environment's own cost is a few
array operations and the dicts of the parallel API. Imports only numpy and gymnasium, as an actor
process that acts with numpy policies does.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

OBSERVATION_SIZE = 4
NO_INFO: dict = {}


class CrowdParallelEnv:
    metadata = {"name": "crowd_v0"}

    def __init__(self, num_agents: int = 1000, episode_ticks: int = 1000, seed: int = 0) -> None:
        self.possible_agents = [f"agent_{index}" for index in range(num_agents)]
        self.agents: list[str] = []
        self.episode_ticks = episode_ticks
        self.rng = np.random.default_rng(seed)
        self.positions = np.zeros((num_agents, OBSERVATION_SIZE), np.float32)
        self.clock = 0
        self._observation_space = gym.spaces.Box(-np.inf, np.inf, (OBSERVATION_SIZE,), np.float32)
        self._action_space = gym.spaces.Discrete(2)
        self._rewards = dict.fromkeys(self.possible_agents, 0.0)
        self._terminations = dict.fromkeys(self.possible_agents, False)
        self._infos = dict.fromkeys(self.possible_agents, NO_INFO)

    def observation_space(self, agent: str) -> gym.Space:
        return self._observation_space

    def action_space(self, agent: str) -> gym.Space:
        return self._action_space

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.positions = self.rng.standard_normal(self.positions.shape).astype(np.float32)
        self.agents = list(self.possible_agents)
        self.clock = 0
        return dict(zip(self.agents, self.positions)), dict(self._infos)

    def step(self, actions: dict) -> tuple[dict, dict, dict, dict, dict]:
        moves = np.fromiter(map(actions.__getitem__, self.agents), np.int64, len(self.agents))
        # A new array each tick: recorded observations (rows of it) must not change later.
        self.positions = self.positions * np.float32(0.9) + (moves[:, None] - 0.5).astype(np.float32) * 0.1
        self.clock += 1
        observations = dict(zip(self.agents, self.positions))
        truncated = self.clock >= self.episode_ticks
        truncations = dict.fromkeys(self.agents, truncated)
        if truncated:
            self.agents = []
        return observations, self._rewards, self._terminations, truncations, self._infos

    def close(self) -> None:
        pass


def parallel_env(**kwargs) -> CrowdParallelEnv:
    return CrowdParallelEnv(**kwargs)
