"""ZeroMQ channels of a run: weights out on PUB/SUB, experience back on PUSH/PULL.

Weights: the publisher is an XPUB socket, so it sees every new subscription and answers it by
re-sending the newest weights. A subscriber that joins late therefore gets the current policy at
once, and nobody sleeps against ZeroMQ's slow-joiner problem. Subscribers keep only the newest
version they have seen.

Experience: actors PUSH messages tagged with the policy version that produced them; the learner
PULLs. A malformed message is logged, counted and dropped; the receiver keeps serving. The queue
between them is short (high-water marks and kernel buffers), which bounds staleness.

Every socket has linger 0, so closing never hangs on a dead peer, and a ZMQ_MAXMSGSIZE set before
it binds or connects (`comm.limits`): sockets that receive data accept frames up to the run's
limit, sockets that only send accept only small control frames. Given the job's keys
(`comm.security.JobKeys`), every channel is CURVE-encrypted and admits only the job's processes:
experience goes to the learner's own key, weights come from the key every weights publisher (the
learner's, each relay's) serves with.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Mapping

import numpy as np
import zmq

from .limits import CONTROL_MESSAGE_BYTES, DEFAULT_MAX_MESSAGE_BYTES
from .security import BROADCAST, LEARNER, JobKeys, authenticate
from .wire import Message, WireError, decode, encode

log = logging.getLogger(__name__)

WEIGHTS = "weights"
#: Malformed messages logged one by one; after these, every 1000th, so that a peer sending junk
#: cannot fill the log (or the memory of whatever keeps log records).
MALFORMED_LOGGED = 10
#: Kernel buffers of the experience channel. Small on purpose: every queued message is experience
#: that grows staler while it waits, so the queue between actors and learner is kept short and a
#: learner that falls behind slows the actors instead of aging the data. The queue's length is the
#: sender's high-water mark: an actor's share of one batch (`runtime.sampling.queued_messages`).
SOCKET_BUFFER_BYTES = 8 * 1024


def make_socket(context: zmq.Context, kind: int, max_message_bytes: int, keys: JobKeys | None = None, *,
                serve: str | None = None, trust: str | None = None) -> zmq.Socket:
    """A socket with linger 0 that drops any peer declaring a frame over `max_message_bytes`; with
    `keys`, a CURVE server of role `serve` (it binds) or a client trusting the server of role
    `trust` (it connects). Everything is set here, before the caller binds or connects."""
    socket = context.socket(kind)
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.MAXMSGSIZE, int(max_message_bytes))
    if keys is not None:
        if serve is not None:
            authenticate(context, keys)
            keys.serve(socket, serve)
        elif trust is not None:
            keys.connect(socket, trust)
        else:
            raise ValueError("a socket with keys either serves or trusts a server role")
    return socket


def bind_random(socket: zmq.Socket, host: str = "127.0.0.1") -> str:
    """Bind to a free port chosen by the OS and return the address peers connect to."""
    port = socket.bind_to_random_port(f"tcp://{host}")
    return f"tcp://{host}:{port}"



def log_malformed(count: int, what: str, error: WireError, where: str = "") -> None:
    """Log the `count`-th malformed message a socket dropped, if it is among the first
    MALFORMED_LOGGED or a multiple of 1000 (the count of all is kept by the caller)."""
    if count <= MALFORMED_LOGGED or count % 1000 == 0:
        log.error("%sdropped malformed %s #%d: %s", where, what, count, error)

class WeightPublisher:
    """Learner side of the weight broadcast."""

    def __init__(self, context: zmq.Context, host: str = "127.0.0.1", sender: str = "learner",
                 keys: JobKeys | None = None) -> None:
        self.socket = make_socket(context, zmq.XPUB, CONTROL_MESSAGE_BYTES, keys, serve=BROADCAST)
        self.socket.setsockopt(zmq.XPUB_VERBOSE, 1)  # hear every subscription, not only the first
        self.address = bind_random(self.socket, host)
        self.sender = sender
        self.version = -1
        self._latest: list[Any] | None = None
        self.joins_served = 0

    def publish(self, version: int, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any] | None = None) -> None:
        self.publish_frames(version, encode(Message(WEIGHTS, self.sender, version, dict(arrays), dict(meta or {}))))

    def publish_frames(self, version: int, frames: list[Any]) -> None:
        """Send an already encoded weights message (a relay forwards the frames it received).

        The frames are checked first exactly as subscribers check them (`decode`, zero copy): an
        invalid message is neither sent nor kept as the newest weights every joining subscriber
        gets, so it cannot stop each restarted actor again. Raises WireError for one."""
        message = decode(frames, known_kinds={WEIGHTS})
        if message.policy_version != version:
            raise WireError(f"frames of version {message.policy_version} published as version {version}")
        self.version = version
        self._latest = frames
        self.socket.send_multipart(frames, copy=False)

    def serve_joins(self) -> int:
        """Answer pending subscriptions with the newest weights; never blocks."""
        served = 0
        while self.socket.poll(0):
            event = self.socket.recv()
            if event[:1] == b"\x01" and self._latest is not None:
                self.socket.send_multipart(self._latest, copy=False)
                served += 1
        self.joins_served += served
        return served

    def close(self) -> None:
        self.socket.close()


class WeightSubscriber:
    """Actor side of the weight broadcast: keeps the newest version it has received."""

    def __init__(self, context: zmq.Context, address: str, keys: JobKeys | None = None,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> None:
        self.socket = make_socket(context, zmq.SUB, max_message_bytes, keys, trust=BROADCAST)
        self.socket.setsockopt(zmq.SUBSCRIBE, b"")
        self.socket.connect(address)
        self.version = -1
        self.dropped = 0

    def poll(self, timeout_ms: int = 0) -> Message | None:
        """The newest weights that arrived since the last call, or None. Waits at most timeout_ms
        for the first message, then drains whatever else is queued without waiting."""
        newest: Message | None = None
        wait = timeout_ms
        while self.socket.poll(wait):
            wait = 0
            frames = self.socket.recv_multipart(copy=False)
            try:
                message = decode(frames, known_kinds={WEIGHTS})
            except WireError as error:
                self.dropped += 1
                log_malformed(self.dropped, "weights message", error)
                continue
            if message.policy_version > self.version and (newest is None or message.policy_version > newest.policy_version):
                newest = message
        if newest is not None:
            self.version = newest.policy_version
        return newest

    def close(self) -> None:
        self.socket.close()


class ExperienceSender:
    """Actor side of the experience channel."""

    def __init__(self, context: zmq.Context, address: str, high_water_mark: int = 1,
                 keys: JobKeys | None = None) -> None:
        self.socket = make_socket(context, zmq.PUSH, CONTROL_MESSAGE_BYTES, keys, trust=LEARNER)
        self.socket.setsockopt(zmq.SNDHWM, high_water_mark)
        self.socket.setsockopt(zmq.SNDBUF, SOCKET_BUFFER_BYTES)
        self.socket.connect(address)

    def send(self, message: Message, timeout_ms: int | None = None) -> bool:
        """Queue a message; with a timeout, give up (and say so) when the learner is that far behind.
        The send after a positive poll does not block either: the peer that made the socket
        writable may be gone by then (a connection whose handshake failed), and a blocking send
        would then wait for a learner that never comes."""
        if timeout_ms is None:
            self.socket.send_multipart(encode(message), copy=False)
            return True
        if not self.socket.poll(timeout_ms, zmq.POLLOUT):
            return False
        try:
            self.socket.send_multipart(encode(message), flags=zmq.NOBLOCK, copy=False)
        except zmq.Again:
            return False
        return True

    def close(self) -> None:
        self.socket.close()


class ExperienceReceiver:
    """Learner side of the experience channel; drops and counts malformed messages."""

    def __init__(self, context: zmq.Context, known_kinds: set[str], host: str = "127.0.0.1",
                 high_water_mark: int = 2, keys: JobKeys | None = None,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> None:
        self.socket = make_socket(context, zmq.PULL, max_message_bytes, keys, serve=LEARNER)
        self.socket.setsockopt(zmq.RCVHWM, high_water_mark)
        self.socket.setsockopt(zmq.RCVBUF, SOCKET_BUFFER_BYTES)
        self.address = bind_random(self.socket, host)
        self.known_kinds = frozenset(known_kinds)
        self.malformed = 0
        self.received = 0

    def receive(self, timeout_ms: int = 0) -> Message | None:
        """The next well-formed message, or None when none arrives within timeout_ms."""
        deadline = time.monotonic() + timeout_ms / 1000
        while self.socket.poll(max(0, round((deadline - time.monotonic()) * 1000))):
            frames = self.socket.recv_multipart(copy=False)
            try:
                message = decode(frames, known_kinds=self.known_kinds)
            except WireError as error:
                self.malformed += 1
                log_malformed(self.malformed, "message", error)
                continue
            self.received += 1
            return message
        return None

    def close(self) -> None:
        self.socket.close()
