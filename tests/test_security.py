"""Per-job CURVE keys on real sockets: keys are handed out by role, so an actor can neither read
the learner's secret nor pose as the learner; a process without the job's keys can neither receive
weights nor inject samples, nor grow a listening process by declaring huge frames before it
presents a key; and a flood of random, truncated and oversized messages leaves every listening
socket serving."""

from __future__ import annotations

import os
import socket
import stat
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import zmq

from lamarckian_hpc.comm import (
    BROADCAST,
    CONTROL_MESSAGE_BYTES,
    DEFAULT_MAX_MESSAGE_BYTES,
    LEARNER,
    WEIGHTS_TOPIC,
    ExperienceReceiver,
    ExperienceSender,
    JobKeys,
    KeyFolderError,
    Message,
    WeightPublisher,
    WeightSubscriber,
    encode,
    stop_authenticator,
)
from lamarckian_hpc.comm.relay import Relay, RelaySpec
from lamarckian_hpc.comm.topology import build_tree

pytestmark = pytest.mark.timeout(300)

KINDS = {"experience"}


@pytest.fixture
def job(tmp_path):
    keys = JobKeys.create(tmp_path / "keys", relays=True)
    context = zmq.Context()
    yield keys, context
    stop_authenticator(context)
    context.destroy(linger=0)


def _experience(value: float) -> Message:
    return Message("experience", "actor-0", 3, {"x": np.full(4, value, np.float32)}, {"actor_index": 0})


def _receive_all(receiver: ExperienceReceiver, seconds: float) -> list[Message]:
    got, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        message = receiver.receive(50)
        if message is not None:
            got.append(message)
    return got


def _secret_text(secret: bytes) -> bytes:
    return b'secret-key = "' + secret + b'"'


def _files_holding(root: Path, text: bytes) -> list[Path]:
    return sorted(path for path in root.rglob("*") if path.is_file() and text in path.read_bytes())


# Keys by role

def test_key_files_are_private_and_a_readable_folder_is_refused(tmp_path):
    keys = JobKeys.create(tmp_path / "keys", relays=True)
    assert stat.S_IMODE(keys.folder.stat().st_mode) == 0o700
    for path in keys.folder.rglob("*"):
        assert stat.S_IMODE(path.stat().st_mode) == (0o700 if path.is_dir() else 0o600), path
    JobKeys.load(keys.actor_folder)
    os.chmod(keys.actor_folder, 0o755)
    with pytest.raises(KeyFolderError, match="private"):
        JobKeys.load(keys.actor_folder)
    with pytest.raises(KeyFolderError, match="no key folder"):
        JobKeys.load(tmp_path / "absent")
    with pytest.raises(KeyFolderError, match="role's folder"):
        JobKeys.load(keys.folder)  # the job's folder as a whole is never loaded by anyone


def test_an_actors_key_material_holds_no_server_secret(tmp_path):
    keys = JobKeys.create(tmp_path / "keys", relays=True)
    actor = JobKeys.load(keys.actor_folder)
    assert actor.serving == {} and actor.admitted is None
    assert actor.trusted == {LEARNER: keys.serving[LEARNER].public, BROADCAST: keys.serving[BROADCAST].public}
    assert actor.client == keys.client
    secrets = [path for path in keys.actor_folder.iterdir() if b"secret-key" in path.read_bytes()]
    assert secrets == [keys.actor_folder / "client.key_secret"]
    # The learner's secret is on no disk at all; the broadcast secret only in the relay folder.
    assert _files_holding(keys.folder, _secret_text(keys.serving[LEARNER].secret)) == []
    assert _files_holding(keys.folder, _secret_text(keys.serving[BROADCAST].secret)) == [
        keys.relay_folder / "broadcast.key_secret"]
    context = zmq.Context()
    try:
        with pytest.raises(KeyFolderError, match="cannot serve as learner"):
            actor.serve(context.socket(zmq.PULL), LEARNER)
    finally:
        context.destroy(linger=0)


def test_a_relay_holds_the_broadcast_pair_and_no_learner_secret(tmp_path):
    keys = JobKeys.create(tmp_path / "keys", relays=True)
    relay = JobKeys.load(keys.relay_folder)
    assert set(relay.serving) == {BROADCAST} and relay.serving[BROADCAST] == keys.serving[BROADCAST]
    # A relay forwards experience up to the learner, so it trusts the learner's public key only.
    assert relay.trusted[LEARNER] == keys.serving[LEARNER].public
    assert _files_holding(keys.relay_folder, keys.serving[LEARNER].secret) == []
    flat = JobKeys.create(tmp_path / "flat")  # a run without relays writes no broadcast secret either
    assert not (flat.folder / "relay").exists()
    assert _files_holding(flat.folder, _secret_text(flat.serving[BROADCAST].secret)) == []
    with pytest.raises(KeyFolderError, match="relays=True"):
        flat.relay_folder  # noqa: B018 (the property raises)


def _impostor(kind: int, actor: JobKeys) -> tuple[zmq.Context, zmq.Socket, str]:
    """A process that holds only an actor's keys binds a CURVE server with the one key pair it has,
    and with no ZAP handler, so it would admit any client that completes the handshake."""
    context = zmq.Context()
    server = context.socket(kind)
    server.setsockopt(zmq.LINGER, 0)
    server.curve_secretkey = actor.client.secret
    server.curve_publickey = actor.client.public
    server.curve_server = True
    port = server.bind_to_random_port("tcp://127.0.0.1")
    return context, server, f"tcp://127.0.0.1:{port}"


def test_a_process_with_only_actor_keys_cannot_pose_as_the_learner(job):
    keys, context = job
    actor = JobKeys.load(keys.actor_folder)
    fake_context, fake_receiver, fake_address = _impostor(zmq.PULL, actor)
    _, fake_publisher, fake_weights = _impostor(zmq.XPUB, actor)
    actor_context = zmq.Context()
    sender = ExperienceSender(actor_context, fake_address, keys=actor)
    subscriber = WeightSubscriber(actor_context, fake_weights, keys=actor)
    try:
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            sender.send(_experience(-1.0), timeout_ms=10)
            fake_publisher.send_multipart([WEIGHTS_TOPIC, *encode(Message("weights", "learner", 1,
                                                                          {"w": np.ones(2, np.float32)}))])
            assert subscriber.poll(50) is None, "an actor took weights from an impostor"
        assert not fake_receiver.poll(200), "an impostor got an actor's experience"
        # The real learner, with the same actor keys on the other end, is reached at once.
        receiver = ExperienceReceiver(context, KINDS, keys=keys)
        member = ExperienceSender(actor_context, receiver.address, keys=actor)
        assert member.send(_experience(1.0), timeout_ms=5000)
        assert receiver.receive(5000) is not None
        member.close()
        receiver.close()
    finally:
        sender.close()
        subscriber.close()
        actor_context.destroy(linger=0)
        fake_context.destroy(linger=0)


def test_a_relay_serves_actors_with_its_own_folder(job, tmp_path):
    keys, context = job
    learner = WeightPublisher(context, keys=keys)
    relay_context = zmq.Context()
    tree = build_tree(["node0", "node1"])
    relay = Relay(RelaySpec("node1", tree.to_dict(), {"node0": learner.address}, ipc_path=f"{tmp_path}/r.ipc",
                            key_folder=str(keys.relay_folder)), relay_context)
    actor_context = zmq.Context()
    subscriber = WeightSubscriber(actor_context, relay.address, keys=JobKeys.load(keys.actor_folder))
    try:
        received, deadline = None, time.monotonic() + 20
        while received is None and time.monotonic() < deadline:
            learner.publish(1, {"w": np.ones(8, np.float32)})
            learner.serve_joins()
            relay.step(20)
            received = subscriber.poll(20)
        assert received is not None and received.policy_version == 1 and relay.stats.forwarded == 1
    finally:
        subscriber.close()
        actor_context.destroy(linger=0)
        relay.close()
        relay_context.destroy(linger=0)
        learner.close()


def _outsider(keys: JobKeys, folder: Path) -> JobKeys:
    """Someone with keys of their own who even learned the job's public keys."""
    own = JobKeys.load(JobKeys.create(folder).actor_folder)
    return JobKeys(own.folder, own.client, dict(keys.trusted))


def test_outsiders_receive_no_weights(job, tmp_path):
    keys, context = job
    publisher = WeightPublisher(context, keys=keys)
    member = WeightSubscriber(context, publisher.address, keys=JobKeys.load(keys.actor_folder))
    spy = WeightSubscriber(context, publisher.address, keys=_outsider(keys, tmp_path / "other"))
    plain = WeightSubscriber(context, publisher.address)
    try:
        deadline = time.monotonic() + 10
        received = None
        while received is None and time.monotonic() < deadline:
            publisher.publish(1, {"w": np.ones(8, np.float32)})
            publisher.serve_joins()
            received = member.poll(100)
        assert received is not None and received.policy_version == 1
        for version in range(2, 12):
            publisher.publish(version, {"w": np.full(8, version, np.float32)})
            publisher.serve_joins()
            time.sleep(0.05)
        assert member.poll(500) is not None
        assert spy.poll(500) is None and spy.version == -1
        assert plain.poll(500) is None and plain.version == -1
    finally:
        for channel in (publisher, member, spy, plain):
            channel.close()


def test_outsiders_cannot_inject_samples(job, tmp_path):
    keys, context = job
    receiver = ExperienceReceiver(context, KINDS, keys=keys)
    attackers = [ExperienceSender(context, receiver.address, keys=_outsider(keys, tmp_path / "other")),
                 ExperienceSender(context, receiver.address)]
    member = ExperienceSender(context, receiver.address, keys=JobKeys.load(keys.actor_folder))
    try:
        for attacker in attackers:
            for _ in range(20):
                attacker.send(_experience(-1.0), timeout_ms=10)
        member.send(_experience(1.0), timeout_ms=2000)
        got = _receive_all(receiver, 1.5)
        assert got, "the job's own actor gets through"
        assert all(float(message.arrays["x"][0]) == 1.0 for message in got), "nothing from outsiders"
    finally:
        for channel in (*attackers, member, receiver):
            channel.close()


# Before authentication: declared frame sizes

GREETING = b"\xff" + bytes(8) + b"\x7f" + b"\x03\x00" + b"CURVE".ljust(20, b"\x00") + b"\x00" + bytes(31)
DECLARED_BYTES = 1 << 30
STREAMED_MEGABYTES = 64
CONNECTIONS = 3


def _stream_huge_declared_frames(address: str) -> int:
    """What a stranger can do without any key: open connections, send a valid ZMTP greeting that
    asks for CURVE, then declare a 1 GiB handshake frame and stream its bytes. Returns the
    megabytes the listener took in before it dropped the connections."""
    host, port = address.removeprefix("tcp://").rsplit(":", 1)
    chunk = bytes(1 << 20)
    streamed = 0
    connections = [socket.create_connection((host, int(port)), timeout=10) for _ in range(CONNECTIONS)]
    try:
        for connection in connections:
            try:
                connection.sendall(GREETING + b"\x06" + DECLARED_BYTES.to_bytes(8, "big"))
                for _ in range(STREAMED_MEGABYTES):
                    connection.sendall(chunk)
                    streamed += 1
            except OSError:  # dropped by the listener: what should happen
                pass
        time.sleep(0.5)  # let ZeroMQ's I/O thread take in whatever is still in flight
    finally:
        for connection in connections:
            connection.close()
    return streamed


@pytest.mark.parametrize("channel", ["receiver", "publisher"])
def test_a_peer_without_keys_streaming_a_huge_declared_frame_cannot_grow_the_process(job, channel):
    keys, context = job
    listener = (ExperienceReceiver(context, KINDS, keys=keys) if channel == "receiver"
                else WeightPublisher(context, keys=keys))
    try:
        process = psutil.Process()
        before = process.memory_info().rss
        streamed = _stream_huge_declared_frames(listener.address)
        grown = (process.memory_info().rss - before) / 2**20
        assert grown < 32, f"grew {grown:.0f} MB from {CONNECTIONS} connections without keys ({streamed} MB taken in)"
        assert streamed < CONNECTIONS * STREAMED_MEGABYTES, "the listener read every declared frame"
        if channel == "receiver":  # and it still serves the job's actors
            member = ExperienceSender(context, listener.address, keys=JobKeys.load(keys.actor_folder))
            assert member.send(_experience(1.0), timeout_ms=5000)
            assert listener.receive(5000) is not None
            member.close()
    finally:
        listener.close()


def test_every_socket_limits_the_frames_it_accepts(job, tmp_path):
    keys, context = job
    actor = JobKeys.load(keys.actor_folder)
    receiver = ExperienceReceiver(context, KINDS, keys=keys, max_message_bytes=5 << 20)
    publisher = WeightPublisher(context, keys=keys)
    sender = ExperienceSender(context, receiver.address, keys=actor)
    subscriber = WeightSubscriber(context, publisher.address, keys=actor, max_message_bytes=7 << 20)
    plain = WeightSubscriber(context, publisher.address)
    relay_context = zmq.Context()
    relay = Relay(RelaySpec("node1", build_tree(["node0", "node1"]).to_dict(), {"node0": publisher.address},
                            ipc_path=f"{tmp_path}/r.ipc", key_folder=str(keys.relay_folder),
                            max_message_bytes=9 << 20), relay_context)
    try:
        limits = {name: channel.getsockopt(zmq.MAXMSGSIZE) for name, channel in [
            ("receiver", receiver.socket), ("publisher", publisher.socket), ("sender", sender.socket),
            ("subscriber", subscriber.socket), ("plain", plain.socket), ("relay upstream", relay._upstream),
            ("relay publisher", relay.publisher.socket)]}
        assert limits == {"receiver": 5 << 20, "publisher": CONTROL_MESSAGE_BYTES, "sender": CONTROL_MESSAGE_BYTES,
                          "subscriber": 7 << 20, "plain": DEFAULT_MAX_MESSAGE_BYTES, "relay upstream": 9 << 20,
                          "relay publisher": CONTROL_MESSAGE_BYTES}
    finally:
        relay.close()
        relay_context.destroy(linger=0)
        for channel in (receiver, publisher, sender, subscriber, plain):
            channel.close()


# After authentication: hostile messages from a peer holding the job's keys

def _garbage(rng: np.random.Generator, valid: list[bytes]) -> list[bytes]:
    """One hostile multipart message: random bytes, a valid message cut short or padded, wrong frame
    counts, or an oversized frame."""
    kind = rng.integers(5)
    if kind == 0:
        return [rng.bytes(int(rng.integers(0, 64))) for _ in range(int(rng.integers(1, 4)))]
    if kind == 1:
        header = valid[0]
        return [header[: int(rng.integers(0, len(header)))], *valid[1:]]
    if kind == 2:
        return [valid[0], valid[1][: int(rng.integers(0, len(valid[1])))]]
    if kind == 3:
        return [valid[0]] + [valid[1]] * int(rng.integers(2, 5))
    return [valid[0], rng.bytes(1 << 16)]


def test_a_flood_of_malformed_messages_leaves_the_receiver_serving(job):
    keys, context = job
    actor = JobKeys.load(keys.actor_folder)
    receiver = ExperienceReceiver(context, KINDS, keys=keys, high_water_mark=1000)
    attacker = context.socket(zmq.DEALER)  # holds the job's keys: the wire format is the last line of defence
    attacker.setsockopt(zmq.LINGER, 0)
    attacker.setsockopt(zmq.SNDHWM, 1000)
    actor.connect(attacker, LEARNER)
    attacker.connect(receiver.address)
    member = ExperienceSender(context, receiver.address, keys=actor)
    valid = [bytes(frame) for frame in encode(_experience(1.0))]
    rng = np.random.default_rng(0)
    pool = [_garbage(rng, valid) for _ in range(2000)]  # 2,000 distinct hostile messages, sent 15 times each
    total = 30_000
    try:
        sent = 0
        while sent < total:  # never block on a full queue: the receiver drains between bursts
            try:
                attacker.send_multipart([b"", *pool[sent % len(pool)]], flags=zmq.NOBLOCK)
                sent += 1
            except zmq.Again:
                while receiver.receive(5) is not None:
                    pass
        deadline = time.monotonic() + 60
        while receiver.malformed + receiver.received < total and time.monotonic() < deadline:
            receiver.receive(50)
        assert receiver.malformed >= total * 0.9
        member.send(_experience(2.0), timeout_ms=2000)
        got = _receive_all(receiver, 1.0)
        assert any(float(message.arrays["x"][0]) == 2.0 for message in got), "still serving after the flood"
    finally:
        attacker.close()
        member.close()
        receiver.close()


def test_a_flood_of_malformed_subscriptions_leaves_the_publisher_serving(job):
    keys, context = job
    actor = JobKeys.load(keys.actor_folder)
    publisher = WeightPublisher(context, keys=keys)
    attacker = context.socket(zmq.XSUB)  # an XSUB may send anything upstream to an XPUB
    attacker.setsockopt(zmq.LINGER, 0)
    attacker.setsockopt(zmq.SNDHWM, 1000)
    actor.connect(attacker, BROADCAST)
    attacker.connect(publisher.address)
    rng = np.random.default_rng(1)
    try:
        publisher.publish(1, {"w": np.ones(8, np.float32)})
        pool = [rng.bytes(int(rng.integers(0, 80))) for _ in range(2000)]
        sent = 0
        while sent < 100_000:
            try:
                attacker.send(pool[sent % len(pool)], flags=zmq.NOBLOCK)
                sent += 1
            except zmq.Again:
                publisher.serve_joins()
                time.sleep(0.001)
        member = WeightSubscriber(context, publisher.address, keys=actor)
        deadline = time.monotonic() + 20
        while member.version < 2 and time.monotonic() < deadline:  # a join may first be answered with version 1
            publisher.serve_joins()
            publisher.publish(2, {"w": np.full(8, 2.0, np.float32)})
            member.poll(100)
        assert member.version == 2
        member.close()
    finally:
        attacker.close()
        publisher.close()
