"""A relay of the tree: weights down from its parent, experience and credits through it.

One relay runs per node (see `topology.py`). It subscribes to its parent's weight publisher, as any
subscriber does (the broadcast topic and one of its own, `channels.subscribe_to_weights`), and
re-publishes every newer version at once on its own `WeightPublisher`, an XPUB socket bound twice:
on TCP for the relays below it and on IPC for the actors of its node; that publisher answers the
joins of its own subscribers, each on the joiner's topic. It forwards the received frames as they
are (zero copy, behind its own broadcast topic frame), once they pass the very check its
subscribers make (`wire.decode`, which only makes views of the frames): a malformed message is
counted and dropped, never forwarded nor kept as the newest weights that every joining subscriber
is sent. The learner never waits for a relay; XPUB drops for a subscriber that cannot keep up
rather than blocking.

Experience goes the other way, as in the Lamarckian paper's tree: the relay's ROUTER (TCP for the
relays below it, IPC for its node's actors) takes what arrives, and its DEALER passes it up to the
parent's ROUTER in bundles (`comm.bundle`): what came up within `bundle_wait_ms` (a few ms), at most
`bundle_bytes`, goes as one message, at once when every credit granted below has come back with its
rollout (nothing more can come), each part with the routing ids of its way; a bundle from a
relay below is opened and its parts join this relay's batch, so the learner takes one message per
first-layer relay batch, not one per rollout. The credits the learner grants come back down the
same route (`comm.credits`), counted per sender and rollout as before; the grants for the senders
behind one relay go to it as one message, which it splits: one grant to each sender of its node,
one grants message to each relay below. The learner thus holds one connection per
relay it feeds, never one per actor, and flow control works through the tree untouched. The relay
decodes what comes up with the wire decoder (to lay it into a bundle; it knows nothing of what the
messages hold), the learner checks every bundle again, and credits bound how much can pass; a
message without a route, or one or a bundle that is not well formed, is dropped and counted here.
The counts of credits granted below and of credited rollouts come back are the relay's own: after
a restart or a loss they may disagree, and a batch then waits out its time bound, as before.
`bundle_wait_ms` 0 forwards message by message, as relays did before bundles. Its DEALER follows the
weights subscription to a new parent when the old one dies.

A relay is given the relay folder of the job's keys (`comm.security`): the client pair it
subscribes with and the broadcast pair it serves with, never the learner's secret.

A dead parent is noticed from the connection itself: the SUB socket sends ZeroMQ heartbeats, and a
socket monitor reports the disconnect (at once when the parent's process dies, after the heartbeat
timeout when its host goes silent). The relay then removes the parent from its copy of the tree
(`BroadcastTree.reattach`) and subscribes to the new parent, whose XPUB sends its newest weights to
the relay on the join. A parent it cannot connect to within the timeout counts as dead the same
way. Other relays are not affected by one relay's death.
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

import zmq
from zmq.utils.monitor import recv_monitor_message

from .bundle import (
    BUNDLE,
    DEFAULT_BUNDLE_BYTES,
    DEFAULT_BUNDLE_WAIT_MS,
    MAX_PART_ROUTE,
    Bundler,
    bundle,
    stackable,
    unbundle,
)
from .channels import (
    CREDIT,
    SOCKET_BUFFER_BYTES,
    WEIGHTS,
    WeightPublisher,
    bind_random,
    grant_message,
    grants_message,
    log_malformed,
    make_socket,
    read_grants,
    receive_frames,
    split_route,
    subscribe_to_weights,
    weights_frames,
)
from .limits import DEFAULT_MAX_MESSAGE_BYTES
from .security import BROADCAST, LEARNER, JobKeys, stop_authenticator
from .topology import BroadcastTree
from .wire import Message, WireError, decode, encode

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RelaySpec:
    """Everything a relay needs, plain data so it can cross a process boundary (and be reused as is
    when the relay's process is restarted)."""

    node: str
    tree: dict[str, Any]
    #: TCP address of the weight publisher of each node above this one (the learner's included).
    upstreams: dict[str, str]
    host: str = "127.0.0.1"
    ipc_path: str | None = None
    #: A host silent this long counts as dead (a dead process is noticed at once, whatever it is):
    #: long enough that a busy node is not taken for one, and its relay's queue not dropped.
    heartbeat_ms: int = 1000
    timeout_ms: int = 10000
    #: The relay folder of the job's keys (`JobKeys.relay_folder`); None for plain sockets.
    key_folder: str | None = None
    #: ZMQ_MAXMSGSIZE of the subscription to the parent: the run's limit (`comm.limits`).
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    #: TCP address of the experience ROUTER of each node above this one (the learner's included);
    #: none: this relay carries weights only.
    experience_upstreams: dict[str, str] | None = None
    #: Where the node's actors send experience (IPC); None: only relays below connect (TCP).
    experience_ipc_path: str | None = None
    #: Experience gathered into one message up (`comm.bundle`): at most this long after the first
    #: part (0: message by message) and this many bytes.
    bundle_wait_ms: float = DEFAULT_BUNDLE_WAIT_MS
    bundle_bytes: int = DEFAULT_BUNDLE_BYTES
    #: The learner rank this relay's experience goes to, where it goes to a rank directly (its parent
    #: is the root, or it is a leaf moved out of its parent's shard): rank 0 serves with the learner's
    #: key, ranks 1.. (which never hold it) with the broadcast pair.
    experience_rank: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RelayStats:
    forwarded: int = 0
    version: int = -1
    malformed: int = 0
    reattachments: int = 0
    parent: str = ""
    joins_served: int = 0  # subscribers below sent the newest weights on joining, one copy each
    experience_up: int = 0  # messages (parts of bundles included) passed up towards the learner
    bundles_up: int = 0  # messages sent up: bundles, and parts sent alone
    credits_down: int = 0  # grants passed down to actors and relays below
    dropped_up: int = 0  # messages that found no room on the way up (their credits are reclaimed)
    malformed_up: int = 0  # messages from below without a route, or bundles not well formed
    malformed_down: int = 0  # grants messages from above not well formed


class Relay:
    """The forwarding loop of one node; `run()` until `stop_event` is set."""

    def __init__(self, spec: RelaySpec, context: zmq.Context | None = None) -> None:
        self.spec = spec
        self.tree = BroadcastTree.from_dict(spec.tree)
        self.tree.index_of(spec.node)  # fail early on a node that is not in the tree
        if self.tree.parent_of(spec.node) is None:
            raise ValueError(f"relay: {spec.node!r} is the learner's node, which publishes itself")
        self.context = context or zmq.Context.instance()
        self.keys = JobKeys.load(spec.key_folder) if spec.key_folder is not None else None
        self.publisher = WeightPublisher(self.context, host=spec.host, sender=f"relay:{spec.node}", keys=self.keys)
        if spec.ipc_path is not None:
            # Made here, on the node that uses it (a node's /tmp is its own), private to the job's user.
            os.makedirs(os.path.dirname(spec.ipc_path) or ".", mode=0o700, exist_ok=True)
            self.publisher.socket.bind(f"ipc://{spec.ipc_path}")
        self.address = self.publisher.address
        self.experience_address: str | None = None
        self._down: zmq.Socket | None = None  # experience from below
        self._up: zmq.Socket | None = None  # experience to the parent
        if spec.experience_upstreams is not None:
            # Serves with the broadcast pair (a relay never holds the learner's secret); admits the job's clients.
            self._down = make_socket(self.context, zmq.ROUTER, spec.max_message_bytes, self.keys, serve=BROADCAST)
            for option in (zmq.RCVHWM, zmq.SNDHWM):
                self._down.setsockopt(option, 0)  # credits bound what passes
            self._down.setsockopt(zmq.ROUTER_HANDOVER, 1)  # a restarted relay below takes its name over
            self._down.setsockopt(zmq.RCVBUF, SOCKET_BUFFER_BYTES)
            self.experience_address = bind_random(self._down, spec.host)
            if spec.experience_ipc_path is not None:
                os.makedirs(os.path.dirname(spec.experience_ipc_path) or ".", mode=0o700, exist_ok=True)
                self._down.bind(f"ipc://{spec.experience_ipc_path}")
        self.stats = RelayStats()
        #: Credits the learner granted the senders below (through this relay) and credited messages
        #: that came back up: when they are equal, no rollout is on its way and the batch goes at once.
        self._granted_below = self._credited_up = 0
        self.bundler = Bundler(max(1, min(spec.bundle_bytes, spec.max_message_bytes)), max(0.0, spec.bundle_wait_ms))
        self.stop_event = threading.Event()
        self._upstream: zmq.Socket | None = None
        self._topic = b""  # this relay's own topic on its parent's publisher
        self._poller = zmq.Poller()
        self._monitor: zmq.Socket | None = None
        self._connected = False
        self._connect_deadline = 0.0
        self._attach(self.tree.parent_of(spec.node) or "")

    @property
    def ipc_address(self) -> str | None:
        return None if self.spec.ipc_path is None else f"ipc://{self.spec.ipc_path}"

    def _attach(self, parent: str) -> None:
        """Subscribe to `parent`'s publisher (closing the previous subscription, if any)."""
        self._close_upstream()
        address = self.spec.upstreams.get(parent)
        if address is None:
            raise KeyError(f"relay {self.spec.node!r}: no publisher address for node {parent!r}")
        socket = make_socket(self.context, zmq.SUB, self.spec.max_message_bytes, self.keys, trust=BROADCAST)
        socket.setsockopt(zmq.HEARTBEAT_IVL, self.spec.heartbeat_ms)
        socket.setsockopt(zmq.HEARTBEAT_TIMEOUT, self.spec.timeout_ms)
        self._topic = subscribe_to_weights(socket)
        self._monitor = socket.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
        socket.connect(address)
        self._upstream = socket
        self._poller = zmq.Poller()
        for watched in (socket, self._monitor, self.publisher.socket):
            self._poller.register(watched, zmq.POLLIN)
        if self._down is not None:
            self._up = self._experience_dealer(parent)
            for watched in (self._down, self._up):
                self._poller.register(watched, zmq.POLLIN)
        self._connected = False
        self._connect_deadline = time.monotonic() + self.spec.timeout_ms / 1000
        self.stats.parent = parent

    def _experience_dealer(self, parent: str) -> zmq.Socket:
        """The DEALER to `parent`'s experience ROUTER, named by this node so that the parent's
        route to it survives a reconnect; it trusts the learner's key or, for a relay, the
        broadcast key that relays serve with."""
        assert self.spec.experience_upstreams is not None
        address = self.spec.experience_upstreams.get(parent)
        if address is None:
            raise KeyError(f"relay {self.spec.node!r}: no experience address for node {parent!r}")
        trust = LEARNER if self.tree.parent_of(parent) is None and not self.spec.experience_rank else BROADCAST
        socket = make_socket(self.context, zmq.DEALER, self.spec.max_message_bytes, self.keys, trust=trust)
        socket.setsockopt(zmq.ROUTING_ID, f"relay:{self.spec.node}".encode())
        for option in (zmq.RCVHWM, zmq.SNDHWM):
            socket.setsockopt(option, 0)
        # On a re-attach the old DEALER is closed with what it queued: let it flush a while to a
        # parent that was only slow (what is lost anyway the learner writes off, `comm.credits`).
        socket.setsockopt(zmq.LINGER, 2000)
        socket.connect(address)
        return socket

    def _pass_experience(self, ready: dict[Any, int]) -> None:
        """Experience up (into the batch, or at once without bundles), grants down, all that is
        queued, never blocking."""
        if self._down is not None and self._down in ready and self._up is not None:
            while self._down.poll(0):
                try:
                    frames = receive_frames(self._down)
                    route, body = split_route(frames)
                    message = decode(body)  # views only: what is passed up is well formed
                    if self.bundler.wait_ms <= 0:
                        self._send_up(frames, 1)
                        continue
                    parts = ([(route + below, part) for below, part in unbundle(message)] if message.kind == BUNDLE
                             else [(route, message)])
                except WireError as error:
                    self.stats.malformed_up += 1
                    log_malformed(self.stats.malformed_up, "message from below", error,
                                  where=f"relay {self.spec.node}: ")
                    continue
                for part in parts:
                    if len(part[0]) > MAX_PART_ROUTE:  # deeper than any tree: nowhere to send its credit
                        self.stats.malformed_up += 1
                        continue
                    credited = bool(part[1].meta.get(CREDIT))
                    self._credited_up += credited
                    if not stackable(part[1]):
                        if credited:
                            self._flush()  # what its sender sent before it goes up first
                        self._send_part(part)
                        continue
                    if not self.bundler.fits(part):
                        self._flush()
                    self.bundler.add(part)
        # Due, or nothing more can come: every credit granted below has come back with its rollout
        # (waiting then would only delay the learner's next batch, and the grants it sends back).
        if self.bundler.due_in() == 0.0 or (self.bundler.parts and self._granted_below <= self._credited_up):
            self._flush()
        if self._up is not None and self._up in ready and self._down is not None:
            while self._up.poll(0):
                frames = self._up.recv_multipart(copy=False)
                if len(frames[0]) == 0:  # addressed to this relay: grants for several below it
                    self._pass_grants(frames)
                else:
                    self._send_down(frames)

    def _pass_grants(self, frames: list[Any]) -> None:
        """Split a grants message: one grant to each sender of this node, one grants message to
        each relay below (`ExperienceReceiver.grant`)."""
        try:
            grants = read_grants(decode(frames[1:], known_kinds={CREDIT}))
        except WireError as error:
            self.stats.malformed_down += 1
            log_malformed(self.stats.malformed_down, "grants message", error, where=f"relay {self.spec.node}: ")
            return
        below: dict[bytes, list[list[Any]]] = {}
        self._granted_below += sum(count for _, count, _ in grants)
        for route, count, limit in grants:
            if len(route) == 1:
                self._send_down([route[0], b"", *encode(grant_message(count, limit))])
            else:
                below.setdefault(route[0], []).append([list(route[1:]), count, limit])
        for hop, hop_grants in below.items():
            self._send_down([hop, b"", *encode(grants_message(hop_grants))])

    def _send_down(self, frames: list[Any]) -> None:
        assert self._down is not None
        try:
            self._down.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
            self.stats.credits_down += 1
        except zmq.ZMQError:  # the peer is gone (a ROUTER drops silently; mandatory or not)
            pass

    def _flush(self) -> None:
        """Send the batch up: one part as it came, several as a bundle."""
        parts = self.bundler.take()
        if len(parts) == 1:
            self._send_part(parts[0])
        elif parts:
            self._send_up([b"", *encode(bundle(parts, f"relay:{self.spec.node}"))], len(parts))

    def _send_part(self, part: tuple[tuple[bytes, ...], Message]) -> None:
        route, message = part
        self._send_up([*route, b"", *encode(message)], 1)

    def _send_up(self, frames: list[Any], messages: int) -> None:
        if self._up is None:
            self.stats.dropped_up += messages
            return
        try:
            self._up.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
            self.stats.experience_up += messages
            self.stats.bundles_up += 1
        except zmq.Again:
            self.stats.dropped_up += messages

    def _close_upstream(self) -> None:
        if self._up is not None:
            self._up.close()
            self._up = None
        if self._upstream is not None:
            self._upstream.disable_monitor()
            self._upstream.close()
        if self._monitor is not None:
            self._monitor.close()
        self._upstream = self._monitor = None

    def _parent_died(self) -> None:
        parent = self.stats.parent
        if self.tree.parent_of(parent) is None:
            # The learner itself: nobody to re-attach to; keep waiting (ZeroMQ reconnects).
            self._connect_deadline = float("inf")
            return
        self.tree = self.tree.reattach(parent)
        self.stats.reattachments += 1
        new_parent = self.tree.parent_of(self.spec.node) or ""
        log.warning("relay %s: parent %s is gone, re-attaching to %s", self.spec.node, parent, new_parent)
        self._attach(new_parent)

    def _on_monitor_event(self) -> None:
        assert self._monitor is not None
        event = recv_monitor_message(self._monitor)["event"]
        if event == zmq.EVENT_CONNECTED:
            self._connected = True
            self._connect_deadline = float("inf")
        elif event == zmq.EVENT_DISCONNECTED:
            self._parent_died()

    def _take_upstream(self) -> None:
        """Forward the next weights message from the parent, its frames counted and its topic frame
        checked and taken off."""
        assert self._upstream is not None
        try:
            frames = weights_frames(receive_frames(self._upstream), self._topic)
        except WireError as error:
            self.stats.malformed += 1
            log_malformed(self.stats.malformed, "weights message", error, where=f"relay {self.spec.node}: ")
            return
        self.forward(frames)

    def forward(self, frames: list[Any]) -> bool:
        """Re-publish a received message (its wire frames, without the topic frame) if it is well
        formed and newer than the last one."""
        try:
            version = decode(frames, known_kinds={WEIGHTS}).policy_version
            if version <= self.stats.version:
                return False  # a re-send on joining a new parent, or a duplicate
            self.publisher.publish_frames(version, frames)
        except WireError as error:
            self.stats.malformed += 1
            log_malformed(self.stats.malformed, "weights message", error, where=f"relay {self.spec.node}: ")
            return False
        self.stats.version = version
        self.stats.forwarded += 1
        return True

    def step(self, timeout_ms: int = 100) -> None:
        """Wait up to timeout_ms for anything (or until the batch up is due), then handle all of it
        without waiting."""
        due = self.bundler.due_in()
        if due is not None:
            timeout_ms = min(timeout_ms, math.ceil(due * 1000))
        ready = dict(self._poller.poll(timeout_ms))
        if self._monitor in ready:
            while self._monitor is not None and self._monitor.poll(0):
                self._on_monitor_event()
        if self._upstream is not None and self._upstream in ready:
            while self._upstream.poll(0):
                self._take_upstream()
        if self.publisher.socket in ready:
            self.stats.joins_served += self.publisher.serve_joins()
        self._pass_experience(ready)
        if not self._connected and time.monotonic() > self._connect_deadline:
            self._parent_died()  # never answered: as good as dead

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                self.step()
        finally:
            self.close()

    def close(self) -> None:
        if self._up is not None:
            self._up.setsockopt(zmq.LINGER, 0)  # stopping for good: nothing to flush to
        self._close_upstream()
        self.publisher.close()
        if self._down is not None:
            self._down.close()
        stop_authenticator(self.context)
        for path in (self.spec.ipc_path, self.spec.experience_ipc_path):
            if path is not None and os.path.exists(path):
                os.unlink(path)


def _relay_main(spec: dict[str, Any], reply: Any) -> None:
    relay = Relay(RelaySpec(**spec))
    reply.send((relay.address, relay.experience_address))
    reply.close()
    relay.run()


def spawn_relay(spec: RelaySpec, timeout_s: float = 30.0) -> tuple[multiprocessing.Process, str]:
    """Start a relay in its own process; returns the process and its TCP weights address once
    bound (`spawn_relay_addresses` for the experience address too)."""
    process, (weights, _) = spawn_relay_addresses(spec, timeout_s)
    return process, weights


def spawn_relay_addresses(spec: RelaySpec, timeout_s: float = 30.0) -> tuple[multiprocessing.Process,
                                                                              tuple[str, str | None]]:
    """Start a relay in its own process; the process and its TCP (weights, experience) addresses."""
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe(duplex=False)
    process = context.Process(target=_relay_main, args=(spec.to_dict(), theirs), daemon=True,
                              name=f"relay-{spec.node}")
    process.start()
    theirs.close()
    if not ours.poll(timeout_s):
        process.kill()
        raise TimeoutError(f"relay {spec.node!r} did not start within {timeout_s} s")
    return process, ours.recv()
