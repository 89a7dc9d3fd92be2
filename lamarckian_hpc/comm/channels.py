"""ZeroMQ channels of a run: weights out on PUB/SUB, experience back on PUSH/PULL.

Weights: the publisher is an XPUB socket, so it sees every new subscription and answers it by
sending the newest weights to the subscriber that joined, and to it alone. A subscriber that joins
late therefore gets the current policy at once, nobody sleeps against ZeroMQ's slow-joiner
problem, and a start of N actors costs N copies of the weights, not the N(N+1)/2 that answering
each join with a broadcast would. Every weights message is a topic frame followed by the wire
format's frames (`comm.wire`): broadcasts go on WEIGHTS_TOPIC, which every subscriber takes; each
subscriber also subscribes to a topic of its own (JOIN_PREFIX and random bytes), and the publisher
answers the subscription it hears for that topic on that topic, which no other subscriber matches.
Subscribers keep only the newest version they have seen.

Experience: actors send messages tagged with the policy version that produced them from a DEALER
to a ROUTER: the learner's, or on a node with a relay, the relay's, which forwards them up the
tree (`comm.relay`), so the learner holds one connection per relay it feeds. Every message starts
with an empty frame after the routing ids the ROUTERs on the way prepend, and the learner answers
on that route with credits (`comm.credits`): an actor sends experience only while it holds one,
which bounds the experience in flight, and so the policy lag, whatever the number of actors. A
malformed message is logged, counted and dropped; the receiver keeps serving.

Every socket has linger 0, so closing never hangs on a dead peer (weights publishers and experience
receivers close with CLOSE_LINGER_MS, which says why), and a ZMQ_MAXMSGSIZE set before it binds or
connects (`comm.limits`): sockets that receive data accept frames up to the run's
limit, sockets that only send accept only small control frames. Given the job's keys
(`comm.security.JobKeys`), every channel is CURVE-encrypted and admits only the job's processes:
experience goes to the learner's own key, weights come from the key every weights publisher (the
learner's, each relay's) serves with.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import zmq

from .bundle import BUNDLE, unbundle
from .credits import CreditLedger
from .limits import CONTROL_MESSAGE_BYTES, DEFAULT_MAX_MESSAGE_BYTES
from .security import BROADCAST, LEARNER, JobKeys, authenticate
from .wire import MAX_ARRAYS, Message, WireError, decode, encode

log = logging.getLogger(__name__)

WEIGHTS = "weights"
#: The first frame of a broadcast weights message; every subscriber subscribes to it.
WEIGHTS_TOPIC = b"w"
#: A subscriber's own topic is JOIN_PREFIX and JOIN_ID_BYTES random bytes: the publisher sends the
#: newest weights to a joiner on it. Neither topic is a prefix of the other (ZeroMQ matches
#: prefixes), and all own topics have one length, so a join's answer reaches its subscriber only.
JOIN_PREFIX = b"j"
JOIN_ID_BYTES = 8
#: The kind of credit requests and grants, and the meta key of a message that spends a credit.
CREDIT = "credit"
#: Malformed messages logged one by one; after these, every 1000th, so that a peer sending junk
#: cannot fill the log (or the memory of whatever keeps log records).
MALFORMED_LOGGED = 10
#: Kernel buffers of the experience channel. Small on purpose: every queued message is experience
#: that grows staler while it waits, so the queue between actors and learner is kept short and a
#: learner that falls behind slows the actors instead of aging the data. The queue's length is the
#: sender's high-water mark: an actor's share of one batch (`runtime.run_shape.credit_window`).
SOCKET_BUFFER_BYTES = 8 * 1024
#: Linger of a weights publisher and an experience receiver when they close. With linger 0, libzmq
#: (4.3.5) aborts the process (`Resource temporarily unavailable (src/session_base.cpp:233)`) when a
#: connection drops while its socket is being torn down and it is part way through a multipart
#: message (a weights message is, for as long as its large array frames take to go out): closing
#: stops the connection's session from reading its queue at once, and when the connection then
#: drops, the session asserts that it can read the rest of that message to throw it away
#: (`session_base_t::clean_pipes`). The end of a run does just that: it closes these sockets, then
#: kills the actors and relays at the other end. With a linger, the session goes on reading its
#: queue, so a connection that drops meanwhile ends as any other does; only `Context.term` waits,
#: at most this long, for a peer that neither reads nor goes (past it, the session is stopped as
#: with linger 0: this is much longer than killing a run's actors takes).
CLOSE_LINGER_MS = 1000


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


def subscribe_to_weights(socket: zmq.Socket) -> bytes:
    """Subscribe a SUB socket to the broadcasts and to a new topic of its own, on which the
    publisher answers its join; returns that topic (for `weights_frames`). Called before connect,
    so that the first subscription the publisher hears already names the joiner."""
    own = JOIN_PREFIX + os.urandom(JOIN_ID_BYTES)
    socket.setsockopt(zmq.SUBSCRIBE, WEIGHTS_TOPIC)
    socket.setsockopt(zmq.SUBSCRIBE, own)
    return own


def weights_frames(frames: list[Any], own_topic: bytes) -> list[Any]:
    """The wire-format frames of a weights message a subscriber received, after its topic frame.
    Raises WireError unless that frame is the broadcast topic or the subscriber's own (ZeroMQ
    filters by prefix only, so a longer first frame could get through)."""
    if len(frames) < 2:
        raise WireError(f"a weights message of {len(frames)} frames: expected a topic frame, then the message's")
    if len(frames[0]) > len(own_topic) or bytes(frames[0]) not in (WEIGHTS_TOPIC, own_topic):
        raise WireError(f"weights topic {bytes(frames[0])[:16]!r} is neither the broadcast's nor this subscriber's")
    return frames[1:]


def join_topic(event: bytes) -> bytes | None:
    """The topic a subscriber joined on, if the XPUB event `event` is a subscription to an own
    topic (b"\\x01" + JOIN_PREFIX + id); None for anything else (the broadcast topic, leaving, junk)."""
    if len(event) == 2 + JOIN_ID_BYTES and event[:2] == b"\x01" + JOIN_PREFIX:
        return event[1:]
    return None


class WeightPublisher:
    """Learner side of the weight broadcast (and each relay's, towards its subscribers)."""

    def __init__(self, context: zmq.Context, host: str = "127.0.0.1", sender: str = "learner",
                 keys: JobKeys | None = None) -> None:
        self.socket = make_socket(context, zmq.XPUB, CONTROL_MESSAGE_BYTES, keys, serve=BROADCAST)
        self.socket.setsockopt(zmq.XPUB_VERBOSE, 1)  # hear every subscription, not only the first
        self.address = bind_random(self.socket, host)
        self.sender = sender
        self.version = -1
        self._latest: list[Any] | None = None
        #: Subscribers sent the newest weights on joining, one copy each (a subscriber that
        #: reconnects joins again); joins before the first weights are not served, the first
        #: broadcast reaches them.
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
        self.socket.send_multipart([WEIGHTS_TOPIC, *frames], copy=False)

    def serve_joins(self) -> int:
        """Send the newest weights to each subscriber that joined since the last call, on its own
        topic, so that nobody else receives a copy; never blocks. The other subscription messages
        (to the broadcast topic, departures, junk) are read and ignored. Returns the joins served."""
        served = 0
        while self.socket.poll(0):
            topic = join_topic(self.socket.recv())
            if topic is not None and self._latest is not None:
                self.socket.send_multipart([topic, *self._latest], copy=False)
                served += 1
        self.joins_served += served
        return served

    def close(self) -> None:
        self.socket.close(linger=CLOSE_LINGER_MS)  # never 0: see CLOSE_LINGER_MS


class WeightSubscriber:
    """Actor side of the weight broadcast: keeps the newest version it has received."""

    def __init__(self, context: zmq.Context, address: str, keys: JobKeys | None = None,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> None:
        self.socket = make_socket(context, zmq.SUB, max_message_bytes, keys, trust=BROADCAST)
        self.topic = subscribe_to_weights(self.socket)
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
            try:
                message = decode(weights_frames(receive_frames(self.socket), self.topic), known_kinds={WEIGHTS})
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


#: Frames of a route (ZeroMQ routing ids, one per relay on the way, then the sender's) at most,
#: before the empty frame that ends it: actors, two layers of relays, one spare.
MAX_ROUTE_FRAMES = 4
#: An actor without a credit this long asks again (with its counts, so nothing is granted twice):
#: a grant lost with a relay that died would otherwise leave it waiting for ever.
ASK_AGAIN_SECONDS = 30.0
#: A send that waits for room looks at the sender's stop event this often.
SEND_SLICE_MS = 100


#: Frames of one message at most: a route, the empty frame after it, the header and its arrays.
MAX_FRAMES = MAX_ROUTE_FRAMES + 2 + MAX_ARRAYS


def receive_frames(socket: zmq.Socket, max_frames: int = MAX_FRAMES) -> list[zmq.Frame]:
    """The frames of the next message (one is ready), holding at most `max_frames` of them:
    ZMQ_MAXMSGSIZE bounds each frame but not their number, so the frames past the bound are taken
    and let go one by one, and the message is refused with WireError."""
    frames: list[zmq.Frame] = []
    excess = 0
    while True:
        frame = socket.recv(copy=False)
        if len(frames) < max_frames:
            frames.append(frame)
        else:
            excess += 1
        if not socket.getsockopt(zmq.RCVMORE):
            break
    if excess:
        raise WireError(f"a message of {len(frames) + excess} frames (at most {max_frames})")
    return frames


def split_route(frames: list[Any]) -> tuple[tuple[bytes, ...], list[Any]]:
    """(route, message frames) of what a ROUTER received: the routing ids up to the empty frame
    that every experience-channel message starts with. Raises WireError without one."""
    for index, frame in enumerate(frames[:MAX_ROUTE_FRAMES + 1]):
        if len(frame) == 0:
            if index == 0:
                break
            return tuple(bytes(f.bytes if hasattr(f, "bytes") else f) for f in frames[:index]), frames[index + 1:]
    raise WireError("no route: an experience-channel message starts with routing ids and an empty frame")


def grant_message(count: int, limit: int) -> Message:
    """`count` new credits, and the sender's limit: the credits granted to it in all."""
    return Message(CREDIT, "learner", -1, {}, {"grant": int(count), "limit": int(limit)})


def grants_message(grants: list[list[Any]]) -> Message:
    """Grants for several senders behind one relay: [route below the relay, count, limit] each."""
    return Message(CREDIT, "learner", -1, {}, {"grants": grants})


#: Grants of one message to a relay at most, credits of one grant at most, and a limit's bound.
MAX_GRANTS = 4096
MAX_GRANT = 1 << 20
MAX_LIMIT = 1 << 62

Grant = tuple[tuple[bytes, ...], int, int]


def _checked_grant(count: Any, limit: Any) -> tuple[int, int]:
    if type(count) is not int or not 0 <= count <= MAX_GRANT:
        raise WireError(f"a grant of {count!r} credits")
    if type(limit) is not int or not count <= limit < MAX_LIMIT:
        raise WireError(f"a grant's limit of {limit!r}")
    return count, limit


def read_grant(message: Message) -> tuple[int, int]:
    """(count, limit) of a grant to one sender, checked; raises WireError."""
    return _checked_grant(message.meta.get("grant"), message.meta.get("limit"))


def read_grants(message: Message) -> list[Grant]:
    """The (route below, count, limit) of a grants message, checked; raises WireError."""
    grants = message.meta.get("grants")
    if message.kind != CREDIT or not isinstance(grants, list) or not 0 < len(grants) <= MAX_GRANTS:
        raise WireError(f"grants are a list of 1 to {MAX_GRANTS} [route, count, limit]")
    checked = []
    for grant in grants:
        if not (isinstance(grant, list) and len(grant) == 3 and isinstance(grant[0], list)):
            raise WireError("a grant is [route, count, limit]")
        route, count, limit = grant
        if not 0 < len(route) < MAX_ROUTE_FRAMES or not all(type(r) is bytes and r for r in route):
            raise WireError(f"a grant's route is 1 to {MAX_ROUTE_FRAMES - 1} routing ids")
        checked.append((tuple(route), *_checked_grant(count, limit)))
    return checked


def credit_request(window: int, received: int, spent: int) -> Message:
    return Message(CREDIT, "sender", -1, {}, {"window": int(window), "received": int(received), "spent": int(spent)})


class ExperienceSender:
    """Actor side of the experience channel: a DEALER that sends experience up (to the learner or
    its node's relay) and holds the credits the learner grants (`comm.credits`).

    Experience is sent with `credited=True` and spends a credit; control messages (hello, an
    environment that fails) spend none. `take_credit` waits until one is held, asking for the
    window first and again after ASK_AGAIN_SECONDS of waiting without one. A wait that long
    means that what went up may have been lost (a relay that died with it queued): what this
    process `announce`d goes up again with each new ask. The routing id is random
    and this process's own; the learner keys its account by the whole route its messages take. No
    send waits past its timeout, or, without one, past the `stop` event."""

    def __init__(self, context: zmq.Context, address: str, keys: JobKeys | None = None, *,
                 trust: str = LEARNER, window: int = 1, high_water_mark: int | None = None,
                 stop: threading.Event | None = None) -> None:
        self.socket = make_socket(context, zmq.DEALER, CONTROL_MESSAGE_BYTES, keys, trust=trust)
        self.socket.setsockopt(zmq.ROUTING_ID, os.urandom(8))
        self.window = max(1, int(window))
        # Credited messages never exceed the window; the rest are a few control messages.
        self.socket.setsockopt(zmq.SNDHWM, high_water_mark or self.window + 4)
        self.socket.setsockopt(zmq.SNDBUF, SOCKET_BUFFER_BYTES)
        self.socket.connect(address)
        self.received = 0  # credits granted to this sender so far (the highest limit it got)
        self.spent = 0  # credited messages sent so far
        self.malformed = 0
        self.stop = stop
        self._asked_at: float | None = None
        self._dry_since: float | None = None  # when the current wait for a credit began
        self._announcements: list[Message] = []

    @property
    def credits(self) -> int:
        """Credits held now."""
        return self.received - self.spent

    def announce(self, message: Message) -> bool:
        """Send a control message that the learner must get once at least (it takes a repeat as
        one): it is sent now and again before each new ask."""
        self._announcements.append(message)
        return self.send(message)

    def ask(self) -> None:
        """Ask the learner for the window, saying what this sender received and spent so far
        (after the announcements again, when this is not the first ask)."""
        if self._asked_at is not None:
            for message in self._announcements:
                self.send(message)
        self._send_frames(encode(credit_request(self.window, self.received, self.spent)), None)
        self._asked_at = time.monotonic()

    def poll_credits(self, timeout_ms: int = 0) -> int:
        """Take in the grants that arrived (waiting up to timeout_ms for the first); credits held."""
        wait = timeout_ms
        while self.socket.poll(wait):
            wait = 0
            frames = self.socket.recv_multipart(copy=False)
            try:
                if len(frames) < 2 or len(frames[0]) != 0:
                    raise WireError("a grant starts with an empty frame")
                _, limit = read_grant(decode(frames[1:], known_kinds={CREDIT}))
            except WireError as error:
                self.malformed += 1
                log_malformed(self.malformed, "credit grant", error)
                continue
            # A limit, not an increment: one that comes twice or late gives nothing past the newest.
            self.received = max(self.received, limit)
        return self.credits

    def take_credit(self, timeout_ms: int) -> bool:
        """Whether a credit is held now or arrives within timeout_ms (asking first if never asked)."""
        if self._asked_at is None:
            self.ask()
        if self.credits > 0 or self.poll_credits(timeout_ms) > 0:
            self._dry_since = None
            return True
        now = time.monotonic()
        if self._dry_since is None:
            self._dry_since = now - timeout_ms / 1000
        # Timed from the start of this wait: after a long quiet spell the last ask is long past,
        # and asking at once would write off grants that are still on their way.
        if now - max(self._dry_since, self._asked_at) > ASK_AGAIN_SECONDS:
            self.ask()
        return False

    def send(self, message: Message, timeout_ms: int | None = None, credited: bool = False) -> bool:
        """Queue a message; with a timeout, give up (and say so) when the learner is that far behind.
        A credited message spends a credit (the caller took one). The send after a positive poll
        does not block either: the peer that made the socket writable may be gone by then (a
        connection whose handshake failed), and a blocking send would then wait for a learner
        that never comes."""
        if credited:  # numbered: the learner can tell a late or lost one
            message = replace(message, meta={**message.meta, CREDIT: self.spent + 1})
        if not self._send_frames(encode(message), timeout_ms):
            return False
        if credited:
            self.spent += 1
        return True

    def _send_frames(self, frames: list[Any], timeout_ms: int | None) -> bool:
        """Send within timeout_ms (None: as long as it takes), in slices that look at the stop
        event: a peer that is gone while its pipe is kept (a relay that died) never holds a
        stopping sender."""
        frames = [b"", *frames]
        deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
        while True:
            stopping = self.stop is not None and self.stop.is_set()
            left = SEND_SLICE_MS if deadline is None else max(0, round((deadline - time.monotonic()) * 1000))
            if self.socket.poll(0 if stopping else min(left, SEND_SLICE_MS), zmq.POLLOUT):
                try:
                    self.socket.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
                    return True
                except zmq.Again:
                    pass
            if stopping or left == 0:
                return False

    def close(self, linger_ms: int | None = None) -> None:
        """Close; `linger_ms` gives the messages still queued that long to reach the peer (an actor
        that was asked to stop hands in what it sampled); None keeps the socket's own linger."""
        self.socket.close(linger=linger_ms)


class ExperienceReceiver:
    """Learner side of the experience channel: a ROUTER every actor or relay connects to, one
    connection per relay it feeds. Drops and counts malformed messages, and grants credits
    (`comm.credits`) as credited messages arrive, never while the learner is not receiving.

    `credit_budget` bounds the messages in flight, and with it the memory the learner can be
    asked to hold, whatever the number of connections: the high-water marks are left open
    (a relay's one connection carries many actors' credited messages), since credits bound them."""

    def __init__(self, context: zmq.Context, known_kinds: set[str], host: str = "127.0.0.1",
                 high_water_mark: int = 0, keys: JobKeys | None = None,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, credit_budget: int = 1 << 20,
                 serve: str = LEARNER) -> None:
        self.socket = make_socket(context, zmq.ROUTER, max_message_bytes, keys, serve=serve)
        self.socket.setsockopt(zmq.RCVHWM, high_water_mark)
        self.socket.setsockopt(zmq.SNDHWM, 0)  # grants are tiny, and a dropped one stalls a sender
        self.socket.setsockopt(zmq.ROUTER_HANDOVER, 1)  # a restarted relay takes its name over at once
        self.socket.setsockopt(zmq.RCVBUF, SOCKET_BUFFER_BYTES)
        self.address = bind_random(self.socket, host)
        self.known_kinds = frozenset(known_kinds) | {CREDIT, BUNDLE}
        self.ledger = CreditLedger(credit_budget)
        self.malformed = 0
        self.received = 0
        self.taken = 0  # ZeroMQ messages taken off the socket (a bundle is one)
        self.bundles = 0  # relay bundles taken (their parts count in `received`)
        self.grant_messages = 0  # messages that carried grants down
        self._parts: deque[tuple[tuple[bytes, ...], Message]] = deque()  # accounted, still to hand out
        self.last_route: tuple[bytes, ...] = ()  # the route of the message `receive` returned last
        self._reclaimed_at = time.monotonic()

    def bind_ipc(self, path: str) -> str:
        """Also listen on `ipc://path` (the actors of this node); returns that address."""
        self.socket.bind(f"ipc://{path}")
        return f"ipc://{path}"

    def receive(self, timeout_ms: int = 0) -> Message | None:
        """The next well-formed message other than a credit request, or None when none arrives
        within timeout_ms. A relay's bundle (`comm.bundle`) is decoded once here and its parts are
        accounted at once, as received (credits spent and asked for per sender, so the grants for
        the whole bundle go down together), then returned one by one as if each had come alone; a
        bundle that does not add up is dropped whole, a part of a kind not taken here alone, both
        counted. Credits are granted on the way."""
        deadline = time.monotonic() + timeout_ms / 1000
        self.ledger.listen()
        try:
            while True:
                if self._parts:
                    self.last_route, message = self._parts.popleft()
                    return message
                if not self.socket.poll(max(0, round((deadline - time.monotonic()) * 1000))):
                    return None
                self.taken += 1
                try:
                    route, body = split_route(receive_frames(self.socket))
                    message = decode(body, known_kinds=self.known_kinds)
                    parts = ([(route + below, part) for below, part in unbundle(message)] if message.kind == BUNDLE
                             else [(route, message)])
                except WireError as error:
                    self.malformed += 1
                    log_malformed(self.malformed, "message", error)
                    continue
                if message.kind == BUNDLE:
                    self.bundles += 1
                for part_route, part in parts:
                    if self._account(part_route, part):
                        self._parts.append((part_route, part))
        finally:
            self.grant()

    def _account(self, route: tuple[bytes, ...], message: Message) -> bool:
        """Credits for a message that arrived; whether it is one to hand out (not a credit
        request, nor a malformed part)."""
        if len(route) > MAX_ROUTE_FRAMES or message.kind not in self.known_kinds or message.kind == BUNDLE:
            self.malformed += 1
            log_malformed(self.malformed, "bundle part", WireError(
                f"kind {message.kind!r} by a route of {len(route)} routing ids"))
            return False
        if message.kind == CREDIT:
            meta = message.meta
            counts = [meta.get(name, 0) for name in ("window", "received", "spent")]
            if not all(type(count) is int and 0 <= count < MAX_LIMIT for count in counts):
                self.malformed += 1
                log_malformed(self.malformed, "credit request", WireError(f"counts {counts!r}"))
                return False
            self.ledger.want(route, *counts)  # the window asked for is a wish: the ledger caps it at a share
            return False
        number = message.meta.get(CREDIT)
        if number is not None:
            if type(number) is not int or not 0 < number < MAX_LIMIT:
                self.malformed += 1
                log_malformed(self.malformed, "credited message", WireError(f"credit number {number!r}"))
                return False
            self.ledger.spend(route, number)  # the only message that keeps an account alive
        self.received += 1
        return True

    def grant(self) -> None:
        """Send the credits the ledger has room for (and reclaim those of silent senders): to a
        sender of this socket's own, one grant; to the senders behind one relay, one message to
        that relay with each sender's route below it and count (`Relay` passes them down)."""
        now = time.monotonic()
        if now - self._reclaimed_at > 1.0:
            self._reclaimed_at = now
            self.ledger.reclaim(now)
        via: dict[bytes, list[list[Any]]] = {}
        for route, count, limit in self.ledger.grants():
            if len(route) == 1:
                self.socket.send_multipart([*route, b"", *encode(grant_message(count, limit))])
                self.grant_messages += 1
            else:
                via.setdefault(route[0], []).append([list(route[1:]), count, limit])
        for hop, grants in via.items():
            self.socket.send_multipart([hop, b"", *encode(grants_message(grants))])
            self.grant_messages += 1

    def close(self) -> None:
        self.socket.close(linger=CLOSE_LINGER_MS)  # grants are multipart too: see CLOSE_LINGER_MS
