"""A relay checks what it forwards with the very decoder its subscribers use: a message they would
reject (here an empty array whose other dimensions overflow, which a header-only check passes) is
neither forwarded nor kept as the newest weights that every joining subscriber is sent, so a
restarted actor is sent the last valid weights instead of a message that stops it again."""

from __future__ import annotations

import time

import msgpack
import numpy as np
import pytest
import zmq

from lamarckian_hpc.comm import SCHEMA_VERSION, Message, WeightPublisher, WeightSubscriber, encode
from lamarckian_hpc.comm.relay import Relay, RelaySpec
from lamarckian_hpc.comm.topology import build_tree

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def context():
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


def absurd(version: int) -> list[bytes]:
    header = {"kind": "weights", "schema": SCHEMA_VERSION, "policy_version": version, "sender": "learner", "meta": {},
              "arrays": [["w", "<f4", [0] + [1 << 30] * 7]]}
    return [msgpack.packb(header, use_bin_type=True), b""]


def valid(version: int) -> list[bytes]:
    message = Message("weights", "learner", version, {"w": np.ones(3, np.float32), "v": np.full(1, version)})
    return [bytes(frame) for frame in encode(message)]


def test_a_relay_neither_forwards_nor_keeps_a_message_its_subscribers_reject(context, tmp_path):
    tree = build_tree(["node0", "node1"])
    learner = WeightPublisher(context)
    relay = Relay(RelaySpec("node1", tree.to_dict(), {"node0": learner.address}, ipc_path=f"{tmp_path}/r.ipc"),
                  context)
    subscriber = None
    try:
        assert not relay.forward(absurd(9)) and relay.stats.malformed == 1
        assert relay.publisher._latest is None and relay.stats.version == -1
        five = valid(5)
        assert relay.forward(five) and relay.publisher._latest is five
        assert not relay.forward(absurd(10))
        assert relay.publisher._latest is five and relay.stats.version == 5 and relay.stats.malformed == 2
        # A subscriber that joins now (an actor restarted after the bad message) is sent version 5.
        subscriber = WeightSubscriber(context, relay.ipc_address)
        received, deadline = None, time.monotonic() + 10
        while received is None and time.monotonic() < deadline:
            relay.step(20)
            received = subscriber.poll(20)
        assert received is not None and received.policy_version == 5 and subscriber.dropped == 0
    finally:
        if subscriber is not None:
            subscriber.close()
        relay.close()
        learner.close()
