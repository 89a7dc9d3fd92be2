"""What the learner and its actors agree on about a run's shape, so that both sides size their
work from one place: the policy id of a single-agent run, the steps of an update and of an actor's
message, the credits in flight, which episodes are recorded, and the environment's spaces.

Both the actor process and the learner process import this module; it imports neither side.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

import gymnasium as gym

from .. import envs  # noqa: F401  (registers the built-in lamarckian/ ids)
from ..config import RunConfig
from ..mdp import make_gym_env
from .algorithms import rl_algorithm

log = logging.getLogger(__name__)

POLICY_ID = "main"


def steps_per_update(config: RunConfig) -> int:
    """Training steps the learner gathers before an update (one actor message for DQN and A3C)."""
    batch_size = getattr(config.algorithm, "batch_size", None)
    return batch_size if batch_size is not None else config.runtime.rollout_steps * config.env.num_envs


#: Sampling time a message should take at least, where an actor's share of a batch takes less: a
#: message costs its actor, the relays on its way and the learner a fixed amount of work (a wake-up
#: of each, a credit's round trip, its encoding), however few steps it carries. On 8 test-cluster
#: hosts sharing 2 cores, CartPole's 40-step shares cost the actors 85 us of CPU per env step,
#: whole rollouts of 256 steps 49 us, and the learner got 0.79 cores instead of 0.66.
MESSAGE_SAMPLING_SECONDS = 0.02


def steps_per_message(batch_steps: int, num_actors: int, num_envs: int, rollout_steps: int,
                      step_seconds: float | None = None) -> int:
    """The message rule on numbers alone (the scale model sizes 6000-actor runs with it): an
    actor's share of a batch in whole ticks of its `num_envs` environments, at most a rollout; and
    where the environment's step is known to take `step_seconds`, as many ticks as sample for
    `MESSAGE_SAMPLING_SECONDS` where that is more, at most a rollout and a batch."""
    rollout = rollout_steps * num_envs
    share = math.ceil(batch_steps / num_actors)
    share_steps = min(rollout, max(num_envs, math.ceil(share / num_envs) * num_envs))
    if step_seconds is None:
        return share_steps
    timed = math.ceil(MESSAGE_SAMPLING_SECONDS / (max(step_seconds, 1e-9) * num_envs))
    batch_ticks = math.ceil(batch_steps / num_envs)  # never more than the learner needs
    return max(share_steps // num_envs, min(rollout_steps, batch_ticks, timed)) * num_envs


def message_steps(config: RunConfig, num_actors: int) -> int:
    """Steps an actor samples per message: `runtime.message_ticks` ticks where set (as
    `with_message_ticks` sets it at the start of a run), else a rollout, or its share of a batch
    when that is smaller (whole ticks of its environments), so that the actors together fill a
    batch and no actor's message is more than the learner needs."""
    num_envs = config.env.num_envs
    if config.runtime.message_ticks is not None:
        return min(config.runtime.rollout_steps, config.runtime.message_ticks) * num_envs
    return steps_per_message(steps_per_update(config), num_actors, num_envs, config.runtime.rollout_steps)


def timed_message_ticks(config: RunConfig, num_actors: int, step_seconds: float) -> int:
    """Ticks per message for an environment whose step takes `step_seconds`: an actor's share of a
    batch, or as many ticks as take `MESSAGE_SAMPLING_SECONDS` where that is more, at most a rollout
    and a batch. Fewer actors then sample at once (the credits are a batch's worth of messages); a
    fast environment's few still fill a batch in that time, and a slow one's messages stay shares."""
    num_envs = config.env.num_envs
    return steps_per_message(steps_per_update(config), num_actors, num_envs, config.runtime.rollout_steps,
                             step_seconds) // num_envs


def env_step_seconds(config: RunConfig, max_steps: int = 256, max_seconds: float = 0.5) -> float:
    """Seconds per step of the configured environment under random actions (episodes reset as
    they end), over `max_steps` steps or `max_seconds`, whichever comes first."""
    env = make_gym_env(config.env.id, config.env.kwargs, config.env.max_episode_steps)
    try:
        return _time_steps(env, config, max_steps, max_seconds)
    finally:
        env.close()


def _time_steps(env: gym.Env, config: RunConfig, max_steps: int = 256, max_seconds: float = 0.5) -> float:
    env.reset(seed=config.seed)
    env.action_space.seed(config.seed)
    steps = 0
    started = time.perf_counter()
    while steps < max_steps and time.perf_counter() - started < max_seconds:
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        steps += 1
        if terminated or truncated:
            env.reset()
    return (time.perf_counter() - started) / steps


def sizes_messages_by_speed(config: RunConfig) -> bool:
    """Whether a run decides its message size from the environment's speed (`with_message_ticks`):
    asynchronous single-agent sampling with batches, where `runtime.message_ticks` is not set."""
    runtime = config.runtime
    return (runtime.message_ticks is None and runtime.sampling == "async" and config.multiagent is None
            and getattr(config.algorithm, "batch_size", None) is not None)


@dataclass(frozen=True)
class EnvironmentProbe:
    """What a run learns from the one environment it makes before it starts: the spaces and, where
    it sizes messages by the environment's speed, the seconds of a step, or why it has none."""

    observation_space: gym.Space
    action_space: gym.Space
    step_seconds: float | None = None
    step_error: str | None = None

    @property
    def spaces(self) -> tuple[gym.Space, gym.Space]:
        return self.observation_space, self.action_space


def probe_environment(config: RunConfig) -> EnvironmentProbe:
    """The configured environment's spaces, and its step timed (`env_step_seconds`) when the run
    sizes its messages by it: one environment made for both, since some take seconds to make. A
    step that raises is kept as `step_error` (the actors meet it too, and report it)."""
    env = make_gym_env(config.env.id, config.env.kwargs, config.env.max_episode_steps)
    try:
        spaces = env.observation_space, env.action_space
        if not sizes_messages_by_speed(config):
            return EnvironmentProbe(*spaces)
        try:
            return EnvironmentProbe(*spaces, step_seconds=_time_steps(env, config))
        except Exception as error:  # noqa: BLE001 - an environment may raise anything from its step
            return EnvironmentProbe(*spaces, step_error=f"{type(error).__name__}: {error}")
    finally:
        env.close()


def with_message_ticks(config: RunConfig, num_actors: int, probe: EnvironmentProbe | None = None) -> RunConfig:
    """The run's config with `runtime.message_ticks` decided, so that the learner's credit budget
    and every actor size messages alike: as set, or timed for asynchronous single-agent sampling
    with batches (`timed_message_ticks`, from `probe`'s step, or from a probe made here); left unset
    otherwise (the share rule)."""
    if not sizes_messages_by_speed(config):
        return config
    runtime = config.runtime
    probe = probe if probe is not None else probe_environment(config)
    step_seconds = probe.step_seconds
    if step_seconds is None:  # the actors meet the same environment and report it; the run goes on
        log.warning("could not time the environment's step (%s); messages stay an actor's share of a batch",
                    probe.step_error)
        return config
    ticks = timed_message_ticks(config, num_actors, step_seconds)
    log.info("messages of %d ticks (%d env steps): an env step takes %.0f us here; an actor's share of a batch "
             "is %d, and a message samples about %.0f ms at least, at most runtime.rollout_steps (%d)",
             ticks, ticks * config.env.num_envs, step_seconds * 1e6, message_steps(config, num_actors),
             MESSAGE_SAMPLING_SECONDS * 1000, runtime.rollout_steps)
    return config.model_copy(update={"runtime": runtime.model_copy(update={"message_ticks": ticks})})


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
