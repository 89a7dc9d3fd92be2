"""Relays that aggregate: many actors' rollouts go up as one message, bounded in bytes, waiting time
and frames, and the learner unpacks it into its rollouts with credits spent and granted per actor.

Real ZeroMQ sockets with the job's CURVE keys, a real relay process (`spawn_relay_addresses`) for
the run's path, relays in a thread where their counters are read; bundles that are not well
formed are refused by the checks alone, and a malformed part costs only itself."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import zmq

from lamarckian_hpc.comm import (
    BROADCAST,
    ExperienceReceiver,
    ExperienceSender,
    JobKeys,
    Message,
    WeightPublisher,
    decode,
    encode,
)
from lamarckian_hpc.comm.bundle import MAX_BUNDLE_PARTS, Bundler, bundle, part_bytes, unbundle
from lamarckian_hpc.comm.relay import Relay, RelaySpec, spawn_relay_addresses
from lamarckian_hpc.comm.topology import build_tree
from lamarckian_hpc.comm.wire import WireError

pytestmark = pytest.mark.timeout(120)


def experience(actor: int, count: int) -> Message:
    return Message("experience", f"actor-{actor}", 3, {"x": np.full(16, actor, np.float32),
                                                       "n": np.array([count], np.int64)}, {"actor": actor})


def frames_of(message: Message) -> list[bytes]:
    return [bytes(frame) for frame in encode(message)]


@pytest.fixture
def context():
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


# ---------------------------------------------------------------- the format and its checks
def hello(actor: int) -> Message:
    return Message("hello", f"actor-{actor}", -1, {}, {"actor": actor})


def test_a_bundle_is_one_message_whose_parts_are_views_of_its_arrays() -> None:
    parts = [((b"a",), experience(1, 0)), ((b"r2", b"b"), experience(2, 5)), ((b"c",), hello(3)),
             ((b"a",), experience(1, 1))]
    frames = encode(bundle(parts, "relay:x"))
    assert len(frames) == 1 + 2  # a header and one frame per array of the experience group: x and n
    message = decode(frames, {"bundle"})
    unbundled = unbundle(message)
    assert [route for route, _ in unbundled] == [(b"a",), (b"r2", b"b"), (b"c",), (b"a",)]
    for (_, original), (_, part) in zip(parts, unbundled):
        assert (part.kind, part.sender, part.policy_version, part.meta) == (
            original.kind, original.sender, original.policy_version, original.meta)
        assert part.arrays.keys() == original.arrays.keys()
        for name, array in original.arrays.items():
            assert np.array_equal(part.arrays[name], array) and part.arrays[name].base is not None  # a view
    with pytest.raises(ValueError, match="0-d"):
        bundle([((b"a",), Message("experience", "a", 1, {"s": np.float32(1.0)}))], "relay:x")


def _tampered(change) -> Message:
    message = decode(encode(bundle([((b"a",), experience(1, 0)), ((b"b",), experience(2, 0))], "relay:x")))
    meta = {"groups": [list(g) for g in message.meta["groups"]], "parts": [list(p) for p in message.meta["parts"]]}
    arrays = dict(message.arrays)
    change(meta, arrays)
    return Message("bundle", "relay:x", -1, arrays, meta)


def _set(index: int, value):
    def change(meta, arrays):
        meta["parts"][0][index] = value
    return change


@pytest.mark.parametrize("change, says", [
    (_set(6, [17, 1]), "do not add up"),  # rows beyond the arrays
    (_set(6, [15, 1]), "do not add up"),  # rows short of them
    (_set(6, [16]), "rows do not match"),
    (_set(6, [16, -1]), "rows do not match"),
    (_set(0, 3), "group 3"),
    (_set(1, [b"a", b"b", b"c", b"d"]), "route"),  # deeper than any tree
    (_set(1, []), "route"),
    (_set(1, ["a"]), "route"),  # a str is not a routing id
    (_set(1, [b"x" * 256]), "route"),
    (_set(4, 1 << 63), "int64"),
    (_set(4, "3"), "int64"),
    (_set(5, [1]), "wrong type"),
    (_set(2, 7), "wrong type"),
    (lambda meta, arrays: meta["parts"].append([0, [b"a"], "x", "y", 0, {}]), "group, route"),
    (lambda meta, arrays: meta.update(parts=[]), "1 to"),
    (lambda meta, arrays: meta.update(parts=meta["parts"] * (MAX_BUNDLE_PARTS // 2 + 1)), "1 to"),
    (lambda meta, arrays: meta.update(groups=[["x", "m"]]), "lacks array"),
    (lambda meta, arrays: meta.update(groups="x"), "groups"),
    (lambda meta, arrays: arrays.update({"9:z": np.zeros(1)}), "not its groups"),
])
def test_a_bundle_that_does_not_add_up_is_refused(change, says) -> None:
    with pytest.raises(WireError, match=says):
        unbundle(_tampered(change))


def test_the_batch_is_bounded_in_bytes_parts_and_waiting_time() -> None:
    part = ((b"a",), Message("experience", "a", 1, {"x": np.zeros(230, np.float32)}))  # 920 + 80 bytes
    assert part_bytes(part[1]) == 1_000
    bundler = Bundler(max_bytes=3_500, wait_ms=5)
    assert bundler.due_in() is None  # empty: nothing is due
    for _ in range(3):
        assert bundler.fits(part)
        bundler.add(part)
    assert not bundler.fits(part)  # a fourth would pass 3,500 bytes
    assert 0 < bundler.due_in() <= 0.005
    time.sleep(0.006)
    assert bundler.due_in() == 0.0
    assert len(bundler.take()) == 3 and bundler.due_in() is None and bundler.bytes == 0
    big = ((b"a",), Message("experience", "a", 1, {"x": np.zeros(10_000, np.float32)}))
    assert bundler.fits(big)  # an empty batch takes a part larger than the bound: it goes alone
    bundler.add(big)
    assert not bundler.fits(part)
    bundler.take()
    # At most MAX_ARRAYS arrays over the groups of one bundle: a group of 200 arrays, then another.
    wide = [((b"a",), Message("k", "a", 1, {f"{g}{i}": np.zeros(1) for i in range(200)})) for g in "pq"]
    roomy = Bundler(max_bytes=1 << 30, wait_ms=5)
    roomy.add(wide[0])
    assert roomy.fits(wide[0]) and not roomy.fits(wide[1])


# ---------------------------------------------------------------- through a relay process
def _relay_spec(tmp_path, tree, receiver_address, publisher_address, relay_folder, node="node1", **bundle):
    return RelaySpec(node, tree.to_dict(), {"node0": publisher_address}, ipc_path=f"{tmp_path}/{node}w.ipc",
                     key_folder=str(relay_folder), experience_upstreams={"node0": receiver_address},
                     experience_ipc_path=f"{tmp_path}/{node}e.ipc", **bundle)


def test_a_relay_process_sends_many_rollouts_as_one_message_and_credits_stay_per_rollout(context, tmp_path) -> None:
    keys = JobKeys.create(tmp_path / "keys")
    relay_folder = keys.write_relay_folder()
    budget, actors = 12, 8
    receiver = ExperienceReceiver(context, {"experience"}, keys=keys, credit_budget=budget)
    publisher = WeightPublisher(context, keys=keys)
    tree = build_tree(["node0", "node1"])
    # A long wait, so that every actor's rollout of a round is in one bundle, whatever the load.
    process, _ = spawn_relay_addresses(_relay_spec(tmp_path, tree, receiver.address, publisher.address,
                                                   relay_folder, bundle_wait_ms=200.0))
    actor_keys = JobKeys.load(keys.actor_folder)
    senders = [ExperienceSender(context, f"ipc://{tmp_path}/node1e.ipc", keys=actor_keys, trust=BROADCAST, window=2)
               for _ in range(actors)]
    try:
        got: dict[int, list[int]] = {actor: [] for actor in range(actors)}
        sent = [0] * actors
        deadline = time.monotonic() + 60
        while sum(map(len, got.values())) < 48:
            assert time.monotonic() < deadline, f"{got} through the relay"
            for actor, sender in enumerate(senders):
                while sender.take_credit(0):
                    assert sender.send(experience(actor, sent[actor]), timeout_ms=1000, credited=True)
                    sent[actor] += 1
            message = receiver.receive(20)
            if message is not None:
                actor = int(message.meta["actor"])
                assert np.all(message.arrays["x"] == actor)
                got[actor].append(int(message.arrays["n"][0]))
            assert receiver.ledger.in_flight <= budget
        # What is still on its way (at most the budget; the senders have stopped) comes in too.
        while (message := receiver.receive(1000)) is not None:
            got[int(message.meta["actor"])].append(int(message.arrays["n"][0]))
        # Each actor's rollouts arrived whole and in order, each one spent its actor's credit.
        assert [len(counts) for counts in got.values()] == sent
        for counts in got.values():
            assert counts == list(range(len(counts)))
        accounts = receiver.ledger.accounts
        assert len(accounts) == actors and {route[0] for route in accounts} == {b"relay:node1"}
        assert sorted(account.spent for account in accounts.values()) == sorted(map(len, got.values()))
        assert receiver.ledger.uncredited == 0 and receiver.malformed == 0
        # Far fewer messages than rollouts at the learner: the relay's batches (credit requests too).
        assert receiver.bundles >= 1
        assert receiver.taken <= receiver.received / 2, (receiver.taken, receiver.received)
        assert sum(sender.spent for sender in senders) <= receiver.received + budget
    finally:
        process.kill()
        process.join(5)
        for sender in senders:
            sender.close()
        publisher.close()
        receiver.close()


def _thread_relay(spec: RelaySpec) -> tuple[Relay, threading.Thread]:
    relay = Relay(spec, zmq.Context())
    thread = threading.Thread(target=relay.run, daemon=True)
    thread.start()
    return relay, thread


def _send_all(senders, rounds: int, receiver: ExperienceReceiver, expect: int, seconds: float = 30) -> list[float]:
    """Each sender sends `rounds` credited messages as credits allow; the receive times of `expect`."""
    times, deadline, sent = [], time.monotonic() + seconds, [0] * len(senders)
    while len(times) < expect:
        assert time.monotonic() < deadline, f"{len(times)} of {expect} messages arrived"
        for k, sender in enumerate(senders):
            if sent[k] < rounds and sender.take_credit(0):
                sender.send(experience(k, sent[k]), timeout_ms=1000, credited=True)
                sent[k] += 1
        if receiver.receive(5) is not None:
            times.append(time.monotonic())
    return times


def test_a_bundle_never_passes_its_byte_bound_and_a_lone_rollout_waits_only_the_wait(context, tmp_path) -> None:
    receiver = ExperienceReceiver(context, {"experience"}, credit_budget=64)
    publisher = WeightPublisher(context)
    tree = build_tree(["node0", "node1"])
    one = sum(len(frame) for frame in frames_of(experience(0, 0)))
    relay, thread = _thread_relay(RelaySpec("node1", tree.to_dict(), {"node0": publisher.address},
                                            experience_upstreams={"node0": receiver.address},
                                            experience_ipc_path=f"{tmp_path}/e.ipc",
                                            bundle_wait_ms=300.0, bundle_bytes=3 * one))
    senders = [ExperienceSender(context, f"ipc://{tmp_path}/e.ipc", window=1) for _ in range(9)]
    try:
        _send_all(senders, 1, receiver, 9)
        # Nine rollouts of `one` bytes under a bound of three: three bundles at least, none larger.
        # (Each sender's credit request came up the same way: 18 messages.)
        deadline = time.monotonic() + 5
        while relay.stats.experience_up < 18:  # counted by the relay's thread just after it sent
            assert time.monotonic() < deadline, relay.stats
            time.sleep(0.01)
        assert relay.stats.experience_up == 18 and relay.stats.bundles_up >= 3
        assert receiver.received == 9 and receiver.taken < 18
        # One rollout alone is held at most the wait: 300 ms, not for ever (nothing else comes).
        started = time.monotonic()
        (arrived,) = _send_all(senders[:1], 2, receiver, 1)
        assert 0.25 <= arrived - started < 2.0, arrived - started
    finally:
        relay.stop_event.set()
        thread.join(5)
        for sender in senders:
            sender.close()
        publisher.close()
        receiver.close()


def test_the_grants_for_a_relays_senders_go_down_as_one_message(context, tmp_path) -> None:
    receiver = ExperienceReceiver(context, {"experience"}, credit_budget=8)
    publisher = WeightPublisher(context)
    tree = build_tree(["node0", "node1"])
    relay, thread = _thread_relay(RelaySpec("node1", tree.to_dict(), {"node0": publisher.address},
                                            experience_upstreams={"node0": receiver.address},
                                            experience_ipc_path=f"{tmp_path}/e.ipc", bundle_wait_ms=5000.0))
    senders = [ExperienceSender(context, f"ipc://{tmp_path}/e.ipc", window=2) for _ in range(4)]
    try:
        for sender in senders:
            sender.ask()
        deadline = time.monotonic() + 10
        while sum(sender.poll_credits(10) for sender in senders) < 8:
            receiver.receive(10)
            assert time.monotonic() < deadline, [sender.credits for sender in senders]
        assert [sender.credits for sender in senders] == [2, 2, 2, 2] and receiver.ledger.in_flight == 8
        bundles, grant_messages, credits_down = receiver.bundles, receiver.grant_messages, relay.stats.credits_down
        for k, sender in enumerate(senders):  # all eight credits spent: the relay's batch goes when the last is in
            for count in range(2):
                assert sender.send(experience(k, count), timeout_ms=1000, credited=True)
        got = [receiver.receive(3000) for _ in range(8)]
        assert all(message is not None for message in got)
        assert receiver.bundles == bundles + 1  # eight rollouts, one message up
        assert receiver.grant_messages == grant_messages + 1  # eight credits back, one message down
        deadline = time.monotonic() + 5
        while relay.stats.credits_down < credits_down + 4:  # split by the relay: one grant of two each
            assert time.monotonic() < deadline, relay.stats
            time.sleep(0.01)
        assert [sender.poll_credits(1000) for sender in senders] == [2, 2, 2, 2]
    finally:
        relay.stop_event.set()
        thread.join(5)
        for sender in senders:
            sender.close()
        publisher.close()
        receiver.close()


def test_a_batch_goes_at_once_when_every_credit_below_has_come_back(context, tmp_path) -> None:
    """Nothing more can come up: waiting would only delay the learner's batch and the grants back."""
    receiver = ExperienceReceiver(context, {"experience"}, credit_budget=4)
    publisher = WeightPublisher(context)
    tree = build_tree(["node0", "node1"])
    relay, thread = _thread_relay(RelaySpec("node1", tree.to_dict(), {"node0": publisher.address},
                                            experience_upstreams={"node0": receiver.address},
                                            experience_ipc_path=f"{tmp_path}/e.ipc", bundle_wait_ms=20_000.0))
    senders = [ExperienceSender(context, f"ipc://{tmp_path}/e.ipc", window=1) for _ in range(4)]
    try:
        started = time.monotonic()
        for sender in senders:
            sender.ask()  # requests carry no credit: nothing is granted below yet, so they go at once
        deadline = started + 10
        while sum(sender.poll_credits(10) for sender in senders) < 4:
            receiver.receive(10)
            assert time.monotonic() < deadline, "the credit requests waited for the bundle's time bound"
        times = _send_all(senders, 1, receiver, 4, seconds=10)
        assert max(times) - started < 10  # not the 20 s bound: the fourth rollout was the last granted
        assert receiver.received == 4 and receiver.bundles >= 1
    finally:
        relay.stop_event.set()
        thread.join(5)
        for sender in senders:
            sender.close()
        publisher.close()
        receiver.close()


def test_two_layers_of_relays_send_one_bundle_with_every_rollouts_route(context, tmp_path) -> None:
    """A first-layer relay opens the bundles of the relay below and sends their parts in its own:
    the learner still sees each actor's own route (relays on the way, then the actor), and its
    grants reach the actors below both relays."""
    receiver = ExperienceReceiver(context, {"experience"}, credit_budget=8)
    publisher = WeightPublisher(context)
    tree = build_tree(["node0", "node1", "node2", "node3", "node4"])  # node4 under node1
    assert tree.parent_of("node4") == "node1"
    upper, upper_thread = _thread_relay(RelaySpec(
        "node1", tree.to_dict(), {"node0": publisher.address}, experience_upstreams={"node0": receiver.address},
        experience_ipc_path=f"{tmp_path}/1.ipc", bundle_wait_ms=50.0))
    lower, lower_thread = _thread_relay(RelaySpec(
        "node4", tree.to_dict(), {"node0": publisher.address, "node1": upper.address},
        experience_upstreams={"node0": receiver.address, "node1": upper.experience_address},
        experience_ipc_path=f"{tmp_path}/4.ipc", bundle_wait_ms=20.0))
    below = [ExperienceSender(context, f"ipc://{tmp_path}/4.ipc", window=1) for _ in range(4)]
    beside = [ExperienceSender(context, f"ipc://{tmp_path}/1.ipc", window=1) for _ in range(2)]
    try:
        _send_all(below + beside, 5, receiver, 30)
        routes = set(receiver.ledger.accounts)
        assert len(routes) == 6
        assert sum(1 for route in routes if route[:2] == (b"relay:node1", b"relay:node4") and len(route) == 3) == 4
        assert sum(1 for route in routes if len(route) == 2 and route[0] == b"relay:node1") == 2
        assert all(account.spent == 5 for account in receiver.ledger.accounts.values())
        assert lower.stats.experience_up >= 20 and upper.stats.experience_up >= 30
        assert receiver.taken < receiver.received  # bundles, not one message per rollout
        assert receiver.malformed == 0 and upper.stats.malformed_up == 0
    finally:
        for relay, thread in ((lower, lower_thread), (upper, upper_thread)):
            relay.stop_event.set()
            thread.join(5)
        for sender in below + beside:
            sender.close()
        publisher.close()
        receiver.close()


def test_the_learner_drops_a_part_it_does_not_take_or_a_bundle_that_does_not_add_up(context) -> None:
    receiver = ExperienceReceiver(context, {"experience"}, credit_budget=8)
    relay = context.socket(zmq.DEALER)  # what a relay's DEALER sends
    relay.setsockopt(zmq.ROUTING_ID, b"relay:x")
    relay.setsockopt(zmq.LINGER, 0)
    relay.connect(receiver.address)
    try:
        stranger = Message("weights", "actor-2", 3, {"x": np.zeros(16, np.float32), "n": np.zeros(1, np.int64)})
        relay.send_multipart([b"", *encode(bundle([((b"a",), experience(1, 0)), ((b"b",), stranger),
                                                   ((b"c",), experience(3, 0))], "relay:x"))])
        relay.send_multipart([b"", *encode(_tampered(_set(6, [17, 1])))])  # dropped whole
        relay.send_multipart([b"", *encode(bundle([((b"d",), experience(4, 0))], "relay:x"))])
        got = []
        deadline = time.monotonic() + 10
        while len(got) < 3 and time.monotonic() < deadline:
            message = receiver.receive(50)
            if message is not None:
                got.append(int(message.meta["actor"]))
        assert got == [1, 3, 4]
        assert receiver.malformed == 2 and receiver.bundles == 2 and receiver.taken == 3
        assert receiver.received == 3
        assert receiver.receive(100) is None  # and the learner goes on serving
    finally:
        relay.close()
        receiver.close()


def test_a_relay_drops_a_grants_message_that_is_not_well_formed_and_passes_the_next(context, tmp_path) -> None:
    learner = context.socket(zmq.ROUTER)  # the learner's end of the relay's experience DEALER
    learner.setsockopt(zmq.LINGER, 0)
    port = learner.bind_to_random_port("tcp://127.0.0.1")
    publisher = WeightPublisher(context)
    tree = build_tree(["node0", "node1"])
    relay, thread = _thread_relay(RelaySpec("node1", tree.to_dict(), {"node0": publisher.address},
                                            experience_upstreams={"node0": f"tcp://127.0.0.1:{port}"},
                                            experience_ipc_path=f"{tmp_path}/e.ipc", bundle_wait_ms=1.0))
    sender = ExperienceSender(context, f"ipc://{tmp_path}/e.ipc", window=2)
    try:
        sender.ask()
        assert learner.poll(10_000), "the credit request never came up"
        hop, actor, empty, *body = learner.recv_multipart()  # a lone part goes up as it came
        assert hop == b"relay:node1" and empty == b"" and decode(body).kind == "credit"
        assert actor == sender.socket.getsockopt(zmq.ROUTING_ID)
        for grants in ([[["a"], 1, 1]], "x", [[[actor], 2]], [[[actor, b"b", b"c", b"d"], 1, 1]]):
            learner.send_multipart([hop, b"", *encode(Message("credit", "learner", -1, {}, {"grants": grants}))])
        learner.send_multipart([hop, b"", *encode(Message("credit", "learner", -1, {}, {"grants": [[[actor], 2, 2]]}))])
        assert sender.poll_credits(5_000) == 2  # the well-formed one came through, split for its sender
        assert relay.stats.malformed_down == 4
    finally:
        relay.stop_event.set()
        thread.join(5)
        sender.close()
        publisher.close()
        learner.close()
