"""The queue between an actor and the learner holds the actor's share of one batch: while the
learner updates, its actors sample on into it, and no more than that waits (staleness)."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import zmq

from lamarckian_hpc.comm import ExperienceReceiver, ExperienceSender
from lamarckian_hpc.config import load_config
from lamarckian_hpc.runtime.messages import KINDS, experience_message
from lamarckian_hpc.runtime.sampling import MAX_QUEUED_BYTES, make_sampling_side, queued_messages, spaces_of

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
BIG_BATCH = ["algorithm.batch_size=4096", "algorithm.num_minibatches=8"]


def test_the_queue_is_one_batch_share_in_messages_and_bounded_in_bytes() -> None:
    quick = load_config(CONFIGS / "ppo_cartpole.yaml")
    big = load_config(CONFIGS / "ppo_cartpole.yaml", BIG_BATCH)
    cartpole = spaces_of(quick)[0]
    rollout = big.runtime.rollout_steps * big.env.num_envs  # 256 steps per message
    assert queued_messages(quick, 2, cartpole) == 1  # 512 steps per batch: 256 per actor, one message
    assert queued_messages(big, 2, cartpole) == 4096 // 2 // rollout == 8
    assert queued_messages(big, 64, cartpole) == 1  # never less than one
    image = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    message_bytes = rollout * 4 * 84 * 84
    assert queued_messages(load_config(CONFIGS / "ppo_cartpole.yaml", ["algorithm.batch_size=65536"]), 2,
                           image) == MAX_QUEUED_BYTES // message_bytes < 65536 // 2 // rollout
    # A Dict space has no dtype: its elements (here 4 + 1 of an image each) count 8 bytes.
    game = gym.spaces.Dict({"screen": image, "score": gym.spaces.Discrete(10)})
    assert queued_messages(load_config(CONFIGS / "ppo_cartpole.yaml", ["algorithm.batch_size=65536"]), 2,
                           game) == MAX_QUEUED_BYTES // (rollout * (4 * 84 * 84 + 1) * 8)


def test_an_actor_queues_its_share_while_the_learner_does_not_receive() -> None:
    config = load_config(CONFIGS / "ppo_cartpole.yaml", BIG_BATCH)
    side = make_sampling_side(config, seed=0)
    side.sample(config.runtime.rollout_steps * config.env.num_envs)
    message = experience_message(0, side.experience.take(), np.zeros(0), np.zeros(0, np.int64), 256)
    expected = queued_messages(config, 2, side.sampler.mdps[0].observation_space(None))
    context = zmq.Context()
    receiver = ExperienceReceiver(context, KINDS)
    sender = ExperienceSender(context, receiver.address, high_water_mark=expected)
    try:
        queued = 0
        while queued < 4 * expected and sender.send(message, timeout_ms=300):
            queued += 1
        assert queued >= expected, f"only {queued} messages queued, the share is {expected}"
        assert queued < 4 * expected  # and the queue is bounded: the learner is not flooded
        assert receiver.receive(1000) is not None  # what waits is whole experience
    finally:
        side.close()
        sender.close()
        receiver.close()
        context.term()
