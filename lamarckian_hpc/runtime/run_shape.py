"""What the learner and its actors agree on about a run's shape, so that both sides size their
work from one place: the policy id of a single-agent run, the steps of an update and of an actor's
message, the credits in flight, which episodes are recorded, and the environment's spaces.

Both the actor process and the learner process import this module; it imports neither side.
"""

from __future__ import annotations

import math

import gymnasium as gym

from .. import envs  # noqa: F401  (registers the built-in lamarckian/ ids)
from ..config import RunConfig
from ..mdp import make_gym_env
from .algorithms import rl_algorithm

POLICY_ID = "main"


def steps_per_update(config: RunConfig) -> int:
    """Training steps the learner gathers before an update (one actor message for DQN and A3C)."""
    batch_size = getattr(config.algorithm, "batch_size", None)
    return batch_size if batch_size is not None else config.runtime.rollout_steps * config.env.num_envs


def message_steps(config: RunConfig, num_actors: int) -> int:
    """Steps an actor samples per message: a rollout, or its share of a batch when that is smaller
    (whole ticks of its environments), so that the actors together fill a batch and no actor's
    message is more than the learner needs: with many actors, one full rollout each would be
    many batches, all aging while they wait."""
    num_envs = config.env.num_envs
    rollout = config.runtime.rollout_steps * num_envs
    share = math.ceil(steps_per_update(config) / num_actors)
    return min(rollout, max(num_envs, math.ceil(share / num_envs) * num_envs))


def credit_budget(config: RunConfig, num_actors: int) -> int:
    """Messages the learner lets be in flight at once (`comm.credits`): `runtime.batches_in_flight`
    batches of messages. Where each message is an update of its own (DQN, A3C: no `batch_size`),
    one per actor, so that every actor samples; their lag has its own bounds (replay, the
    gradient staleness limit). A multi-agent rollout feeds several policies' batches at once: one
    per actor too, at least."""
    per_message = getattr(config.algorithm, "batch_size", None) is None or config.multiagent is not None
    messages = math.ceil(config.runtime.batches_in_flight * steps_per_update(config) / message_steps(config, num_actors))
    return max(1, messages, num_actors if per_message else 1)


def credit_window(config: RunConfig, num_actors: int) -> int:
    """Credits one actor may hold at once: its share of the budget (one at least), so that with
    the budget to spare, every actor samples its part of the batches in flight without waiting."""
    return max(1, math.ceil(credit_budget(config, num_actors) / num_actors))


def recorded_every(config: RunConfig) -> int:
    """One episode in how many the run records (0: none); actors that send gradients (A3C) send
    no experience, so nothing would carry their episodes to the learner."""
    return 0 if rl_algorithm(config).actor_gradients else config.storage.trajectories.every_episodes


def spaces_of(config: RunConfig) -> tuple[gym.Space, gym.Space]:
    """Observation and action space of the configured environment (made once and closed)."""
    env = make_gym_env(config.env.id, config.env.kwargs, config.env.max_episode_steps)
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()
