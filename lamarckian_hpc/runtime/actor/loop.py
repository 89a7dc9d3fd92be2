"""An actor: samples with the newest weights it has and sends experience to the learner.

This is the loop of one actor process, free of Ray so it can run (and be tested) in any process.
It samples a message only while it holds a credit the learner granted (`comm.credits`), so the
experience in flight stays within `runtime.batches_in_flight` batches whatever the number of
actors, and a message it samples is sent at once with the weights it was sampled with. In
asynchronous sampling it waits for nothing else; in synchronous sampling it samples its share of
a batch with policy version v, then waits for v+1, as RLlib does.

An actor that only acts samples with a torch-free policy and never imports torch; only A3C's
actors (which compute gradients) and CNN actors do (`sampling.needs_torch`). Keep torch imports
out of this module's top level.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading

import numpy as np
import zmq

from ...comm import LEARNER, ExperienceSender, JobKeys, Message, WeightSubscriber, limit_bytes
from ...config import RunConfig
from ...mdp import EnvironmentFailingError
from ..algorithms import rl_algorithm
from ..messages import Recorded, env_failing_message, experience_message, gradients_message, hello_message
from ..run_shape import credit_window, message_steps, steps_per_update
from .sampling import SamplingSide
from .sides import make_sampling_side

log = logging.getLogger(__name__)
WAIT_POLL_MS = 50
#: How long a stopped actor's last messages have to leave its process.
STOP_LINGER_MS = 2000


class ActorLoop:
    def __init__(self, config: RunConfig, actor_index: int, num_actors: int, weights_address: str,
                 experience_address: str, use_torch: bool = False, experience_server: str = LEARNER) -> None:
        """`experience_server`: the key role of whoever listens at `experience_address`, the
        learner (LEARNER) or its node's relay (BROADCAST, the key relays serve with)."""
        self.config = config
        self.actor_index = actor_index
        self.num_actors = num_actors
        self.weights_address = weights_address
        self.experience_address = experience_address
        self.experience_server = experience_server
        self.use_torch = use_torch  # sample with torch even when a torch-free policy would do (to compare)
        self.stop_event = threading.Event()
        self.sent = 0  # messages sent by this process (numbered, so the learner can spot a lost one)
        self.recordings_too_large = 0  # recorded episodes left out: a message could not carry them

    def run(self) -> None:
        config = self.config
        algorithm = rl_algorithm(config)
        context = zmq.Context()
        keys = None
        if config.runtime.transport_security == "curve":
            if config.runtime.key_folder is None:
                raise ValueError("runtime.transport_security=curve needs runtime.key_folder, the job's key folder")
            keys = JobKeys.load(config.runtime.key_folder)
        subscriber = WeightSubscriber(context, self.weights_address, keys=keys,
                                      max_message_bytes=limit_bytes(config.runtime.max_message_megabytes))
        side = make_sampling_side(config, seed=config.seed + 7919 * (self.actor_index + 1), use_torch=self.use_torch)
        sender = ExperienceSender(context, self.experience_address, keys=keys, trust=self.experience_server,
                                  window=credit_window(config, self.num_actors), stop=self.stop_event)
        if side.model is not None:  # A3C, CNN or asked for: this actor runs torch
            import torch

            torch.set_num_threads(1)
        rollout = message_steps(config, self.num_actors)
        self.share = math.ceil(steps_per_update(config) / self.num_actors)
        synchronous = config.runtime.sampling == "sync"
        try:
            sender.announce(hello_message(self.actor_index, os.getpid(), socket.gethostname()))
            version = self._wait_for_weights(subscriber, side, newer_than=-1)
            sent_with_version = 0
            frames_before, errors_before = side.sampler.env_frames, side.sampler.env_errors
            while not self.stop_event.is_set():
                if synchronous and sent_with_version >= self.share:
                    version = self._wait_for_weights(subscriber, side, newer_than=version)
                    sent_with_version = 0
                if not sender.take_credit(WAIT_POLL_MS):
                    continue
                message = subscriber.poll(0)  # the newest weights, also those that came while waiting
                if message is not None:
                    version = self._load(message, side)
                    sent_with_version = 0
                steps = min(rollout, self.share - sent_with_version) if synchronous else rollout
                try:
                    side.sample(steps)
                except EnvironmentFailingError as error:
                    # Restarting would fail the same way: say why once, then wait to be stopped.
                    log.error("actor %d stops sampling: %s", self.actor_index, error)
                    sender.send(env_failing_message(self.actor_index, str(error)))
                    self.stop_event.wait()
                    break
                frames, errors = side.sampler.env_frames, side.sampler.env_errors
                # One message per policy that gathered steps (a multi-agent run's sides have several);
                # the frames and errors since the last message are counted in the first, and the
                # last spends the rollout's credit.
                parts = side.take_experience()
                for part, (policy_id, batch, completed) in enumerate(parts):
                    returns = np.array([r.episode_return for r in completed])
                    lengths = np.array([r.length for r in completed], dtype=np.int64)
                    if algorithm.actor_gradients:  # torch: only such actors compute gradients
                        gradients, diagnostics = algorithm.build("actor_gradients", side.model, batch,
                                                                 config.algorithm)
                        message = gradients_message(self.actor_index, version, gradients, len(batch), returns,
                                                    lengths, frames - frames_before, diagnostics,
                                                    errors - errors_before)
                    else:
                        message = experience_message(self.actor_index, batch, returns, lengths,
                                                     frames - frames_before, errors - errors_before,
                                                     sequence=self.sent, recorded=self._recordings(completed),
                                                     policy_id=policy_id)
                    sender.send(message, credited=part == len(parts) - 1)
                    self.sent += 1
                    frames_before, errors_before = frames, errors
                    sent_with_version += len(batch)
        finally:
            side.close()
            subscriber.close()
            # Asked to stop (its node leaves the run): the last messages still go out.
            sender.close(linger_ms=STOP_LINGER_MS if self.stop_event.is_set() else None)
            context.term()

    def _recordings(self, completed: list) -> tuple[Recorded, ...]:
        """The recorded episodes among `completed`, as many as fit in half a message (the learner's
        socket refuses larger ones, and the experience must get through); the rest are left out."""
        room = limit_bytes(self.config.runtime.max_message_megabytes) // 2
        recorded = []
        for index, result in enumerate(completed):
            steps = result.recorded
            if steps is None:
                continue
            size = steps.nbytes
            if size > room:
                self.recordings_too_large += 1
                if self.recordings_too_large == 1:
                    log.warning("actor %d: a recorded episode of %d steps (%.0f MB) is larger than a message may be; "
                                "such episodes are not recorded (runtime.max_message_megabytes)", self.actor_index,
                                len(steps), size / 2**20)
                continue
            room -= size
            recorded.append((index, steps))
        return tuple(recorded)

    def _load(self, message: Message, side: SamplingSide) -> int:
        version = side.load_broadcast(message)  # every policy's weights and version
        if "epsilon" in message.meta:
            side.set_epsilon(float(message.meta["epsilon"]))
        share = message.meta.get("sync_share")  # among the actors sampling now (nodes join and leave)
        if type(share) is int and share > 0:
            self.share = share
        return version

    def _wait_for_weights(self, subscriber: WeightSubscriber, side: SamplingSide, newer_than: int) -> int:
        while not self.stop_event.is_set():
            message = subscriber.poll(WAIT_POLL_MS)
            if message is not None and message.policy_version > newer_than:
                return self._load(message, side)
        return newer_than
