"""Per-job CURVE keys on real sockets: a process without the job's keys can neither receive weights
nor inject samples, and a flood of random, truncated and oversized messages leaves every
listening socket serving."""

from __future__ import annotations

import os
import stat
import time

import numpy as np
import pytest
import zmq

from lamarckian_hpc.comm import (ExperienceReceiver, ExperienceSender, JobKeys, KeyFolderError, Message,
                                 WeightPublisher, WeightSubscriber, encode, stop_authenticator)

KINDS = {"experience"}


@pytest.fixture
def job(tmp_path):
    keys = JobKeys.create(tmp_path / "keys")
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


def test_key_files_are_private_and_a_readable_folder_is_refused(tmp_path):
    keys = JobKeys.create(tmp_path / "keys")
    assert stat.S_IMODE(keys.folder.stat().st_mode) == 0o700
    for path in keys.folder.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    os.chmod(keys.folder, 0o755)
    with pytest.raises(KeyFolderError, match="private"):
        JobKeys.load(keys.folder)
    with pytest.raises(KeyFolderError, match="no key folder"):
        JobKeys.load(tmp_path / "absent")


def test_outsiders_receive_no_weights(job, tmp_path):
    keys, context = job
    publisher = WeightPublisher(context, keys=keys)
    member = WeightSubscriber(context, publisher.address, keys=keys)
    # An outsider who even learned the server's public key, with keys of its own, and one without CURVE.
    outsider_keys = JobKeys.create(tmp_path / "other")
    impostor = JobKeys(outsider_keys.folder, keys.server_public, outsider_keys.server_secret,
                       outsider_keys.client_public, outsider_keys.client_secret)
    spy = WeightSubscriber(context, publisher.address, keys=impostor)
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
        for socket in (publisher, member, spy, plain):
            socket.close()


def test_outsiders_cannot_inject_samples(job, tmp_path):
    keys, context = job
    receiver = ExperienceReceiver(context, KINDS, keys=keys)
    outsider = JobKeys.create(tmp_path / "other")
    impostor = JobKeys(outsider.folder, keys.server_public, outsider.server_secret, outsider.client_public,
                       outsider.client_secret)
    attackers = [ExperienceSender(context, receiver.address, keys=impostor),
                 ExperienceSender(context, receiver.address)]
    member = ExperienceSender(context, receiver.address, keys=keys)
    try:
        for attacker in attackers:
            for _ in range(20):
                attacker.send(_experience(-1.0), timeout_ms=10)
        member.send(_experience(1.0), timeout_ms=2000)
        got = _receive_all(receiver, 1.5)
        assert got, "the job's own actor gets through"
        assert all(float(message.arrays["x"][0]) == 1.0 for message in got), "nothing from outsiders"
    finally:
        for socket in (*attackers, member, receiver):
            socket.close()


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
    receiver = ExperienceReceiver(context, KINDS, keys=keys, high_water_mark=1000)
    attacker = context.socket(zmq.PUSH)  # holds the job's keys: the wire format is the last line of defence
    attacker.setsockopt(zmq.LINGER, 0)
    attacker.setsockopt(zmq.SNDHWM, 1000)
    keys.connect(attacker)
    attacker.connect(receiver.address)
    member = ExperienceSender(context, receiver.address, keys=keys)
    valid = [bytes(frame) for frame in encode(_experience(1.0))]
    rng = np.random.default_rng(0)
    pool = [_garbage(rng, valid) for _ in range(2000)]  # 2,000 distinct hostile messages, sent 50 times each
    total = 100_000
    try:
        sent = 0
        while sent < total:  # never block on a full queue: the receiver drains between bursts
            try:
                attacker.send_multipart(pool[sent % len(pool)], flags=zmq.NOBLOCK)
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
    publisher = WeightPublisher(context, keys=keys)
    attacker = context.socket(zmq.XSUB)  # an XSUB may send anything upstream to an XPUB
    attacker.setsockopt(zmq.LINGER, 0)
    attacker.setsockopt(zmq.SNDHWM, 1000)
    keys.connect(attacker)
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
        member = WeightSubscriber(context, publisher.address, keys=keys)
        received, deadline = None, time.monotonic() + 20
        while received is None and time.monotonic() < deadline:
            publisher.serve_joins()
            publisher.publish(2, {"w": np.full(8, 2.0, np.float32)})
            received = member.poll(100)
        assert received is not None and received.policy_version == 2
        member.close()
    finally:
        attacker.close()
        publisher.close()
