"""Fuzzing live sockets of a CURVE job: a learner's receiver and publisher, a relay in its own
thread and context, and an actor's sender and subscriber, while hostile peers throw at them mutated
messages (holding the job's keys, so only the wire format stands in the way), junk subscriptions,
and raw TCP junk that never completes a handshake (random bytes, greetings that declare huge frames,
greetings of another mechanism). Every valid message still arrives, nothing invalid is ever
delivered or forwarded, and a subscriber that joins after all of it gets the newest valid weights."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import msgpack
import numpy as np
import psutil
import pytest
import zmq
from fuzz_budget import examples

from lamarckian_hpc.comm import (
    BROADCAST,
    LEARNER,
    SCHEMA_VERSION,
    WEIGHTS_TOPIC,
    ExperienceReceiver,
    ExperienceSender,
    JobKeys,
    Message,
    WeightPublisher,
    WeightSubscriber,
    WireError,
    decode,
    encode,
    stop_authenticator,
)
from lamarckian_hpc.comm.channels import MALFORMED_LOGGED
from lamarckian_hpc.comm.relay import Relay, RelaySpec
from lamarckian_hpc.comm.topology import build_tree
from lamarckian_hpc.comm.wire import MAX_HEADER_BYTES

pytestmark = pytest.mark.timeout(300)

ROUNDS = examples(300)
JUNK_PER_ROUND = 8
DEADLINE_SECONDS = 30.0


def experience(index: int) -> Message:
    return Message("experience", "actor-0", index, {"x": np.full(16, index, np.float32)}, {"sequence": index})


def weights(version: int) -> Message:
    return Message("weights", "learner", version, {"w": np.full((8, 8), version, np.float32),
                                                   "b": np.arange(4, dtype=np.int64) + version})


def _raw(kind: str, version: int, arrays: list[Any], *buffers: bytes, **fields: Any) -> list[bytes]:
    head = {"kind": kind, "schema": SCHEMA_VERSION, "policy_version": version, "sender": "x", "meta": {},
            "arrays": arrays, **fields}
    return [msgpack.packb(head, use_bin_type=True), *buffers]


def crafted(kind: str) -> list[list[bytes]]:
    """Messages that once got through or cost dearly: an empty array with an absurd shape, a
    header of a million empty maps, deep nesting, a uint64 version, a repeated array name."""
    inner = b"\xdc" + (4096).to_bytes(2, "big") + b"\x80" * 4096
    maps = b"\xdc" + (200).to_bytes(2, "big") + inner * 200
    deep: Any = 1
    for _ in range(40):
        deep = [deep]
    return [
        _raw(kind, 10**6, [["a", "<f4", [0] + [1 << 30] * 7]], b""),
        [maps], [b"\x80" * (MAX_HEADER_BYTES + 1)],
        _raw(kind, 10**6, [], meta={"deep": deep}),
        _raw(kind, (1 << 64) - 1, []),
        _raw(kind, 10**6, [["a", "|u1", [1]], ["a", "|u1", [1]]], b"a", b"b"),
    ]


def hostile(rng: np.random.Generator, base: list[bytes], kind: str) -> list[bytes]:
    """A message `decode` rejects: crafted, cut, padded, with frames missing or added, or with
    header bytes flipped (kept only once decode is seen to reject it)."""
    choice = int(rng.integers(0, 7))
    if choice == 0:
        pool = crafted(kind)
        return pool[int(rng.integers(0, len(pool)))]
    if choice == 1:
        return [base[0][:int(rng.integers(0, len(base[0])))], *base[1:]]
    if choice == 2:
        return base[:int(rng.integers(1, len(base)))]
    if choice == 3:
        return base + [rng.bytes(int(rng.integers(0, 16)))]
    if choice == 4:
        index = int(rng.integers(1, len(base)))
        return [*base[:index], base[index] + rng.bytes(int(rng.integers(1, 9))), *base[index + 1:]]
    if choice == 5:
        return [rng.bytes(int(rng.integers(0, 64))) for _ in range(int(rng.integers(1, 4)))]
    while True:
        mutated = bytearray(base[0])
        for position in rng.integers(0, len(mutated), size=int(rng.integers(1, 4))):
            mutated[position] = int(rng.integers(0, 256))
        frames = [bytes(mutated), *base[1:]]
        try:
            decode(frames, known_kinds={kind})
        except WireError:
            return frames


def greeting(mechanism: bytes) -> bytes:
    return b"\xff" + bytes(8) + b"\x7f" + b"\x03\x00" + mechanism.ljust(20, b"\x00") + b"\x00" + bytes(31)


def tcp_junk(rng: np.random.Generator) -> bytes:
    """What a stranger without keys sends on a fresh TCP connection."""
    choice = int(rng.integers(0, 5))
    if choice == 0:
        return rng.bytes(int(rng.integers(1, 4096)))
    if choice == 1:  # a CURVE greeting, then a handshake frame declared 1 GiB long, and some of it
        return greeting(b"CURVE") + b"\x06" + (1 << 30).to_bytes(8, "big") + bytes(1 << 16)
    if choice == 2:  # another mechanism than the server's
        return greeting(b"NULL") + b"\x04\x1a\x05READY\x0bSocket-Type\x00\x00\x00\x04PUSH" + b"\x00\x03abc"
    if choice == 3:
        return greeting(b"CURVE")[:int(rng.integers(1, 64))]
    return greeting(b"CURVE") + rng.bytes(int(rng.integers(1, 512)))


def throw_tcp_junk(addresses: list[str], stop: threading.Event, thrown: list[int]) -> None:
    rng = np.random.default_rng(7)
    while not stop.is_set():
        host, port = addresses[int(rng.integers(0, len(addresses)))].removeprefix("tcp://").rsplit(":", 1)
        try:
            with socket.create_connection((host, int(port)), timeout=2) as connection:
                connection.sendall(tcp_junk(rng))
        except OSError:  # dropped by the listener mid-send: as it should be
            pass
        thrown[0] += 1
        time.sleep(0.005)


@pytest.fixture
def job(tmp_path):
    keys = JobKeys.create(tmp_path / "keys", relays=True)
    contexts = {name: zmq.Context() for name in ("learner", "relay", "actor")}
    yield keys, contexts
    for context in contexts.values():
        stop_authenticator(context)
        context.destroy(linger=0)


def test_live_sockets_serve_valid_traffic_through_mutated_messages_and_tcp_junk(job, tmp_path, record_property,
                                                                               caplog):
    keys, contexts = job
    actor_keys = JobKeys.load(keys.actor_folder)
    receiver = ExperienceReceiver(contexts["learner"], {"experience"}, keys=keys, high_water_mark=1000)
    learner = WeightPublisher(contexts["learner"], keys=keys)
    relay = Relay(RelaySpec("node1", build_tree(["node0", "node1"]).to_dict(), {"node0": learner.address},
                            ipc_path=f"{tmp_path}/relay.ipc", key_folder=str(keys.relay_folder)), contexts["relay"])
    relay_thread = threading.Thread(target=relay.run, daemon=True)
    relay_thread.start()
    actor = contexts["actor"]
    member = ExperienceSender(actor, receiver.address, keys=actor_keys)
    subscriber = WeightSubscriber(actor, relay.ipc_address, keys=actor_keys)
    attacker = actor.socket(zmq.DEALER)  # an actor gone bad: it holds the job's keys
    attacker.setsockopt(zmq.LINGER, 0)
    actor_keys.connect(attacker, LEARNER)
    attacker.connect(receiver.address)
    subscription_junk = actor.socket(zmq.XSUB)
    subscription_junk.setsockopt(zmq.LINGER, 0)
    actor_keys.connect(subscription_junk, BROADCAST)
    subscription_junk.connect(relay.address)
    stop, thrown = threading.Event(), [0]
    junk_thread = threading.Thread(target=throw_tcp_junk, args=([receiver.address, learner.address, relay.address],
                                                               stop, thrown), daemon=True)
    rng = np.random.default_rng(20240611)
    experience_base = [bytes(frame) for frame in encode(experience(0))]
    weights_base = [bytes(frame) for frame in encode(weights(0))]
    rss_before = psutil.Process().memory_info().rss
    received: list[Message] = []
    versions: list[int] = []
    junk_sent = 0
    try:
        junk_thread.start()
        for round_ in range(1, ROUNDS + 1):
            assert member.send(experience(round_), timeout_ms=5000), "the actor could not send"
            for _ in range(JUNK_PER_ROUND):
                try:
                    attacker.send_multipart([b"", *hostile(rng, experience_base, "experience")], flags=zmq.NOBLOCK)
                    junk_sent += 1
                except zmq.Again:
                    pass
                # What the relay is sent: the broadcast topic (now and then with junk after it), then junk.
                topic = WEIGHTS_TOPIC + (rng.bytes(int(rng.integers(1, 40))) if rng.random() < 0.1 else b"")
                learner.socket.send_multipart([topic, *hostile(rng, weights_base, "weights")])
                subscription_junk.send(rng.bytes(int(rng.integers(0, 40))))
            learner.publish(round_, weights(round_).arrays)
            learner.serve_joins()
            while (message := receiver.receive(1)) is not None:
                received.append(message)
            if (update := subscriber.poll(0)) is not None:
                versions.append(update.policy_version)
        deadline = time.monotonic() + DEADLINE_SECONDS
        while (len(received) < ROUNDS or receiver.malformed < junk_sent) and time.monotonic() < deadline:
            if (message := receiver.receive(20)) is not None:
                received.append(message)
        republished = 0.0
        while subscriber.version < ROUNDS and time.monotonic() < deadline:
            # Under the flood the learner's PUB may drop past its high-water mark, the newest
            # version among them; a learner keeps publishing, so it comes again.
            if time.monotonic() - republished > 0.5:
                learner.publish(ROUNDS, weights(ROUNDS).arrays)
                republished = time.monotonic()
            learner.serve_joins()
            if (update := subscriber.poll(20)) is not None:
                versions.append(update.policy_version)
        stop.set()
        junk_thread.join(10)

        assert [int(m.meta["sequence"]) for m in received] == list(range(1, ROUNDS + 1)), "valid experience lost"
        for message in received:
            np.testing.assert_array_equal(message.arrays["x"], np.full(16, message.policy_version, np.float32))
        assert receiver.malformed == junk_sent and receiver.received == ROUNDS
        assert subscriber.version == ROUNDS and versions == sorted(versions)
        assert subscriber.dropped == 0, "the relay forwarded a message its subscribers reject"
        assert relay.stats.malformed >= ROUNDS and relay.stats.version == ROUNDS
        assert thrown[0] > 50
        late = WeightSubscriber(actor, relay.ipc_address, keys=actor_keys)
        got = None
        while got is None and time.monotonic() < deadline + 10:
            got = late.poll(50)
        late.close()
        assert got is not None and got.policy_version == ROUNDS, "a late subscriber got no valid weights"
        np.testing.assert_array_equal(got.arrays["w"], weights(ROUNDS).arrays["w"])
        # Thousands of malformed messages, but a bounded log: a flood of junk must not fill it.
        dropped = [record for record in caplog.records if record.name.startswith("lamarckian_hpc.comm")
                   and record.levelname == "ERROR"]
        bound = 3 * MALFORMED_LOGGED + (receiver.malformed + subscriber.dropped + relay.stats.malformed) // 1000
        assert 0 < len(dropped) <= bound, f"{len(dropped)} log records for dropped messages"
        grown = (psutil.Process().memory_info().rss - rss_before) / 2**20
        assert grown < 200, f"grew {grown:.0f} MB"
        for name, count in {"valid_messages": 2 * ROUNDS, "hostile_messages": junk_sent + 2 * JUNK_PER_ROUND * ROUNDS,
                            "tcp_junk_connections": thrown[0]}.items():
            record_property(name, count)  # counted by benchmarks/reliability/faults.py
    finally:
        stop.set()
        relay.stop_event.set()
        relay_thread.join(10)
        for closing in (attacker, subscription_junk):
            closing.close()
        for channel in (member, subscriber, receiver, learner):
            channel.close()
