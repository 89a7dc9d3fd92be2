"""ZMQ_MAXMSGSIZE of a run: sized from its largest legitimate message with a safety factor, at least
a floor, at most what the wire format accepts, overridden by `runtime.max_message_megabytes`; the
estimate bounds a real rollout from above, and the learner hands the resolved limit to its actors
and relays through their config."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from lamarckian_hpc.comm import MEGABYTE, encode, largest_message_bytes, limit_bytes, message_limit
from lamarckian_hpc.comm.limits import DEFAULT_MAX_MESSAGE_BYTES, MAX_MESSAGE_BYTES, SAFETY_FACTOR, space_elements
from lamarckian_hpc.comm.wire import MAX_HEADER_BYTES
from lamarckian_hpc.config import ConfigError, load_config

CARTPOLE = Path(__file__).resolve().parents[1] / "configs" / "ppo_cartpole.yaml"


def test_the_limit_is_the_largest_message_times_the_safety_factor_between_floor_and_cap():
    assert message_limit(10 * MEGABYTE) == SAFETY_FACTOR * (10 * MEGABYTE + MAX_HEADER_BYTES)
    assert message_limit(0) == SAFETY_FACTOR * MAX_HEADER_BYTES == 4 * MEGABYTE  # the smallest run's
    assert message_limit(600 * MEGABYTE) == MAX_MESSAGE_BYTES
    assert message_limit(10 * MEGABYTE, override_megabytes=1.5) == round(1.5 * MEGABYTE)
    assert message_limit(1000, override_megabytes=4096) == MAX_MESSAGE_BYTES
    assert limit_bytes(None) == DEFAULT_MAX_MESSAGE_BYTES and limit_bytes(2.0) == 2 * MEGABYTE


def test_space_elements_of_boxes_discrete_and_nested_spaces():
    box = gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)
    assert space_elements(box) == 84 * 84 * 4
    assert space_elements(gym.spaces.Discrete(6)) == 1
    extra = gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Box(0, 1, (3,))))
    nested = gym.spaces.Dict({"image": box, "extra": extra})
    assert space_elements(nested) == 84 * 84 * 4 + 1 + 3


def test_the_largest_message_is_the_weights_or_a_rollout():
    box, discrete = gym.spaces.Box(0, 1, (4,)), gym.spaces.Discrete(2)
    assert largest_message_bytes({"w": np.zeros(1 << 20, np.float32)}, 256, box, discrete) == 4 << 20
    assert largest_message_bytes({"w": np.zeros(8, np.float32)}, 256, box, discrete) == 256 * (2 * 4 + 1 + 7) * 8


def test_the_estimate_bounds_a_real_rollout_and_the_learner_resolves_it_for_its_actors():
    from lamarckian_hpc.runtime.actor.sides import make_sampling_side
    from lamarckian_hpc.runtime.algorithms import make_learner
    from lamarckian_hpc.runtime.messages import experience_message
    from lamarckian_hpc.runtime.run_shape import spaces_of
    from lamarckian_hpc.runtime.runners.distributed import with_message_limit

    config = load_config(CARTPOLE, ["runtime.rollout_steps=16"])
    spaces = spaces_of(config)
    weights = make_learner(config, *spaces).weights()
    steps = config.runtime.rollout_steps * config.env.num_envs
    side = make_sampling_side(config, seed=1)
    try:
        side.sample(steps)  # ticks until at least `steps` are in: a message may hold a few more
        batch = side.experience.take()
        completed = side.sampler.take_completed()
    finally:
        side.close()
    message = experience_message(0, batch, np.array([r.episode_return for r in completed]),
                                 np.array([r.length for r in completed], np.int64), 100)
    sent = sum(memoryview(frame).nbytes for frame in encode(message)[1:])
    assert 0 < sent <= largest_message_bytes(weights, steps, *spaces)

    resolved = with_message_limit(config, weights, spaces)
    megabytes = resolved.runtime.max_message_megabytes
    expected = message_limit(largest_message_bytes(weights, steps, *spaces))
    assert megabytes == expected / MEGABYTE and limit_bytes(megabytes) == expected and 4 <= megabytes < 5
    assert type(resolved).model_validate(resolved.to_json_dict()).runtime.max_message_megabytes == megabytes
    overridden = with_message_limit(load_config(CARTPOLE, ["runtime.max_message_megabytes=12.5"]), weights, spaces)
    assert overridden.runtime.max_message_megabytes == 12.5


@pytest.mark.parametrize("value", ["0", "0.5", "2048", "nan", "inf", "-1"])
def test_the_override_is_bounded_and_finite(value):
    with pytest.raises(ConfigError):
        load_config(CARTPOLE, [f"runtime.max_message_megabytes={value}"])
