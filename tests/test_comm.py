"""The wire format and the ZeroMQ channels, over real tcp sockets on 127.0.0.1."""

from __future__ import annotations

import pickle
import signal
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
import zmq

from lamarckian_hpc.comm import (
    SCHEMA_VERSION,
    WEIGHTS_TOPIC,
    ExperienceReceiver,
    ExperienceSender,
    Message,
    WeightPublisher,
    WeightSubscriber,
    WireError,
    bind_random,
    decode,
    encode,
)
from lamarckian_hpc.comm.wire import MAX_HEADER_BYTES

pytestmark = pytest.mark.timeout(120)

EXPERIENCE = "experience"
DEADLINE_SECONDS = 5.0
DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
          "float16", "float32", "float64"]
SHAPES = [(), (0,), (5,), (3, 4), (2, 3, 4)]


@pytest.fixture(scope="module")
def context():
    context = zmq.Context()
    yield context
    context.term()


@pytest.fixture
def closing():
    """Channels and sockets registered here are closed after the test, even when it fails."""
    things: list[Any] = []
    yield things
    for thing in reversed(things):
        thing.close()


class RawDealer:
    """A plain DEALER that starts every message with the empty frame the experience channel expects,
    for sending frames no sender would make."""

    def __init__(self, context: zmq.Context, address: str) -> None:
        self.socket = context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(address)

    def send_multipart(self, frames, flags: int = 0) -> None:
        self.socket.send_multipart([b"", *frames], flags=flags)

    def send(self, frame: bytes) -> None:
        self.send_multipart([frame])

    def close(self) -> None:
        self.socket.close()


def receiver_and_raw_push(context, closing) -> tuple[ExperienceReceiver, RawDealer]:
    """A receiver and a plain socket connected to it, for sending frames no sender would make."""
    receiver = ExperienceReceiver(context, {EXPERIENCE})
    closing.append(receiver)
    push = RawDealer(context, receiver.address)
    closing.append(push)
    return receiver, push


def sample(dtype: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 100, size=shape) % (2 if dtype == "bool" else 100)).astype(dtype)


def round_trip_arrays() -> dict[str, np.ndarray]:
    arrays = {f"{dtype}_{'x'.join(map(str, shape)) or 'scalar'}": sample(dtype, shape)
              for dtype in DTYPES for shape in SHAPES}
    arrays["frame_stack"] = np.random.default_rng(1).integers(0, 256, size=(1, 84, 84, 4), dtype=np.uint8)
    arrays["strided"] = np.arange(48, dtype=np.float32).reshape(6, 8)[:, ::2]
    arrays["fortran"] = np.asfortranarray(np.arange(12, dtype=np.int64).reshape(3, 4))
    return arrays


def assert_same(message: Message, expected: Message) -> None:
    assert (message.kind, message.sender, message.policy_version) == (expected.kind, expected.sender, expected.policy_version)
    assert message.meta == expected.meta
    assert message.arrays.keys() == expected.arrays.keys()
    for name, array in expected.arrays.items():
        got = message.arrays[name]
        assert got.dtype == array.dtype and got.shape == array.shape, name
        np.testing.assert_array_equal(got, array, err_msg=name)


def header(**fields: Any) -> dict[str, Any]:
    base = {"kind": EXPERIENCE, "schema": SCHEMA_VERSION, "policy_version": 1, "sender": "actor-0", "meta": {},
            "arrays": [["a", "|u1", [3]]]}
    base.update(fields)
    return base


def frames_for(head: Any, *buffers: bytes) -> list[bytes]:
    return [msgpack.packb(head, use_bin_type=True), *buffers]


# Wire format

META = {"episode": 3, "return": -1.5, "tags": ["a", "b"], "nested": {"ok": True, "none": None}, "blob": b"\x00\xff"}


def test_round_trip_keeps_values_dtypes_shapes_and_meta():
    arrays = {name: array for name, array in round_trip_arrays().items() if array.ndim}
    message = Message(EXPERIENCE, "actor-7", 42, arrays, META)
    frames = encode(message)
    assert len(frames) == 1 + len(arrays)
    decoded = decode(frames, known_kinds={EXPERIENCE})
    assert_same(decoded, message)
    for name, array in arrays.items():
        if array.size and array.flags.c_contiguous:  # sent from the array's own memory, read back as a view
            assert np.shares_memory(decoded.arrays[name], array), name
    from_bytes = decode([bytes(frame) for frame in frames], known_kinds={EXPERIENCE})
    assert_same(from_bytes, message)
    for name, array in from_bytes.arrays.items():
        assert array.size == 0 or array.flags.writeable is False, name


def test_round_trip_keeps_zero_dimensional_arrays():
    message = Message(EXPERIENCE, "actor-7", 1, {dtype: sample(dtype, ()) for dtype in DTYPES})
    assert_same(decode(encode(message)), message)


def push_pull_round_trip(context, closing) -> tuple[Message, Message, ExperienceReceiver]:
    receiver = ExperienceReceiver(context, {EXPERIENCE})
    closing.append(receiver)
    sender = ExperienceSender(context, receiver.address)
    closing.append(sender)
    message = Message(EXPERIENCE, "actor-1", 9, {k: v for k, v in round_trip_arrays().items() if v.ndim}, META)
    assert sender.send(message, timeout_ms=2000)
    received = receiver.receive(timeout_ms=5000)
    assert received is not None
    return message, received, receiver


def test_round_trip_through_push_pull(context, closing):
    message, received, receiver = push_pull_round_trip(context, closing)
    assert_same(received, message)
    for name, array in received.arrays.items():
        if array.size:
            assert array.base is not None and not array.flags.owndata, name
    assert (receiver.received, receiver.malformed) == (1, 0)


def test_arrays_received_over_zmq_are_read_only(context, closing):
    _, received, _ = push_pull_round_trip(context, closing)
    for name, array in received.arrays.items():
        if array.size:
            assert array.flags.writeable is False, name
            with pytest.raises(ValueError):
                array.flat[0] = 0


@pytest.mark.parametrize("array", [np.array([{"a": 1}, None], dtype=object), np.array(["ab", "c"]),
                                   np.array([b"ab"]), np.array([1 + 2j])], ids=["object", "str", "bytes", "complex"])
def test_encode_rejects_dtypes_off_the_list(array):
    with pytest.raises(WireError):
        encode(Message(EXPERIENCE, "actor-0", 0, {"bad": array}))


HEADERS_THAT_ARE_NOT_MAPS = [b"", b"\xc1", b"\x93\x01\x02", b"\x92\x01", msgpack.packb([1, 2, 3]), msgpack.packb("text"),
                             msgpack.packb(7), msgpack.packb(None), bytes(range(256))]


@pytest.mark.parametrize("head", HEADERS_THAT_ARE_NOT_MAPS)
def test_decode_rejects_headers_that_are_not_a_msgpack_map(head):
    with pytest.raises(WireError):
        decode([head, b"abc"])


def test_decode_rejects_an_empty_frame_list_and_random_bytes():
    with pytest.raises(WireError):
        decode([])
    rng = np.random.default_rng(0)
    for _ in range(200):
        with pytest.raises(WireError):
            decode([bytes([0xC1]) + rng.bytes(int(rng.integers(0, 64)))])


BAD_FIELDS = {
    "schema 2": {"schema": 2}, "schema 0": {"schema": 0}, "schema text": {"schema": "1"}, "no schema": {"schema": None},
    "unknown kind": {"kind": "weights"}, "kind int": {"kind": 3},
    "version text": {"policy_version": "1"}, "version float": {"policy_version": 1.0}, "version none": {"policy_version": None},
    "sender int": {"sender": 7}, "sender bytes": {"sender": b"actor"}, "sender none": {"sender": None},
    "meta list": {"meta": [1, 2]}, "arrays map": {"arrays": {"a": 1}}, "arrays none": {"arrays": None},
    "too many arrays": {"arrays": [["a", "|u1", [0]]] * 257},
    "descriptor short": {"arrays": [["a", "|u1"]]}, "descriptor name int": {"arrays": [[1, "|u1", [3]]]},
    "shape not list": {"arrays": [["a", "|u1", 3]]},
    **{f"dtype {d}": {"arrays": [["a", d, [3]]]} for d in ["O", "|O", "<U5", ">c16", "<c16", ">u2", "S3", "V3", "<M8[s]"]},
    "negative dim": {"arrays": [["a", "|u1", [-3]]]}, "negative dims": {"arrays": [["a", "|u1", [-1, -3]]]},
    "float dim": {"arrays": [["a", "|u1", [3.0]]]}, "text dim": {"arrays": [["a", "|u1", ["3"]]]},
    "nine dims": {"arrays": [["a", "|u1", [1] * 8 + [3]]]},
    "size mismatch": {"arrays": [["a", "|u1", [4]]]}, "size mismatch 2d": {"arrays": [["a", "|u1", [2, 2]]]},
    "over the cap": {"arrays": [["a", "|u1", [1 << 15, 1 << 15, 2]]]},
    "over the cap float64": {"arrays": [["a", "<f8", [1 << 28]]]}, "dim over the cap": {"arrays": [["a", "|u1", [1 << 31]]]},
}


def test_the_crafted_baseline_header_is_valid():
    message = decode(frames_for(header(), b"abc"), known_kinds={EXPERIENCE})
    assert message.arrays["a"].tolist() == [97, 98, 99]
    assert (message.kind, message.sender, message.policy_version, message.meta) == (EXPERIENCE, "actor-0", 1, {})


@pytest.mark.parametrize("fields", BAD_FIELDS.values(), ids=BAD_FIELDS.keys())
def test_decode_rejects_bad_header_fields(fields):
    arrays = fields.get("arrays")
    if isinstance(arrays, list) and len(arrays) > 1:
        buffers = [b""] * len(arrays)
    elif isinstance(arrays, list) and arrays and isinstance(arrays[0], list) and len(arrays[0]) == 3 and arrays[0][1] != "|u1":
        buffers = [bytes(3 * np.dtype(arrays[0][1]).itemsize)]  # the right size, so only the dtype is wrong
    else:
        buffers = [b"abc"]
    with pytest.raises(WireError):
        decode(frames_for(header(**fields), *buffers), known_kinds={EXPERIENCE})


def test_decode_rejects_wrong_frame_counts():
    two = header(arrays=[["a", "|u1", [3]], ["b", "|u1", [1]]])
    decode(frames_for(two, b"abc", b"d"))
    for frames in (frames_for(two), frames_for(two, b"abc"), frames_for(two, b"abc", b"d", b"e"), frames_for(header())):
        with pytest.raises(WireError):
            decode(frames)


@pytest.mark.parametrize("extension", [msgpack.ExtType(5, b"payload"), msgpack.ExtType(127, b"\x00" * 16), msgpack.Timestamp(1, 0)],
                         ids=["ext", "ext16", "timestamp"])
def test_decode_rejects_msgpack_extension_types(extension):
    for head in (header(meta={"x": extension}), header(meta={"x": [1, {"y": extension}]}), header(sender=extension), extension):
        with pytest.raises(WireError):
            decode(frames_for(head, b"abc"))


def test_decode_rejects_empty_msgpack_extension_types():
    with pytest.raises(WireError):
        decode(frames_for(header(meta={"x": msgpack.ExtType(5, b"")}), b"abc"))


class CreatesFile:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return open, (self.path, "w")


@pytest.mark.parametrize("protocol", [0, 2, pickle.HIGHEST_PROTOCOL])
def test_decode_never_unpickles(tmp_path, protocol):
    probe = tmp_path / "probe"
    pickle.loads(pickle.dumps(CreatesFile(str(probe)), protocol=protocol)).close()
    assert probe.exists(), "the payload is live: unpickling it creates a file"
    target = tmp_path / "target"
    payload = pickle.dumps(CreatesFile(str(target)), protocol=protocol)
    for frames in ([payload], [payload, payload], frames_for(header(meta={"p": payload}), b"abc")[:1] + [payload]):
        with pytest.raises(WireError):
            decode(frames)
    assert decode(frames_for(header(meta={"p": payload}, arrays=[]))).meta["p"] == payload
    assert not target.exists()


def test_decode_rejects_bool_policy_version():
    with pytest.raises(WireError):
        decode(frames_for(header(policy_version=True), b"abc"))


def test_decode_rejects_bool_dims():
    with pytest.raises(WireError):
        decode(frames_for(header(arrays=[["a", "|u1", [True, 3]]]), b"abc"))


def test_decode_rejects_shapes_whose_size_overflows_int64():
    with pytest.raises(WireError):
        decode(frames_for(header(arrays=[["a", "|u1", [1 << 30, 1 << 30, 16]]]), b""))


EMPTY_BUT_ABSURD = {
    "zero first": ["a", "|u1", [0] + [1 << 30] * 7],
    "zero last": ["a", "<f8", [1 << 30] * 3 + [0]],
    "zero between": ["a", "<i4", [1 << 30, 0, 1 << 30, 1 << 30]],
}


@pytest.mark.parametrize("descriptor", EMPTY_BUT_ABSURD.values(), ids=EMPTY_BUT_ABSURD.keys())
def test_decode_rejects_empty_arrays_whose_other_dimensions_overflow(descriptor):
    """Zero bytes declared and zero sent pass the size check; numpy then refuses to make such an
    empty array with a ValueError of its own ("array is too big"), which no receiver catches."""
    with pytest.raises(WireError):
        decode(frames_for(header(arrays=[descriptor]), b""))


def test_empty_arrays_of_sensible_shapes_still_decode():
    arrays = {"frames": np.zeros((0, 84, 84, 4), np.uint8), "middle": np.zeros((3, 0, 2), np.float64)}
    decoded = decode(encode(Message(EXPERIENCE, "actor-0", 1, arrays)))
    assert {name: (a.shape, a.dtype) for name, a in decoded.arrays.items()} == {
        name: (a.shape, a.dtype) for name, a in arrays.items()}


def empty_maps_header(size: int) -> bytes:
    """About `size` bytes of msgpack that unpack to one empty map per byte: lists of 4,096 empty
    maps in a list, within every length limit msgpack is given."""
    inner = b"\xdc" + (4096).to_bytes(2, "big") + b"\x80" * 4096
    count = max(1, size // len(inner))
    return b"\xdc" + count.to_bytes(2, "big") + inner * count


def traced_peak(call) -> int:
    """Peak bytes the Python allocator handed out while `call` ran."""
    tracemalloc.start()
    try:
        call()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


def test_a_header_over_the_size_cap_is_refused_before_it_is_unpacked():
    head = empty_maps_header(4 << 20)  # 4 MB: unpacked, four million maps of some 70 bytes each

    def refuse() -> None:
        with pytest.raises(WireError, match="byte cap"):
            decode([head, b"abc"])

    assert traced_peak(refuse) < 1 << 20


def test_a_header_of_many_small_maps_is_given_up_early():
    head = empty_maps_header(MAX_HEADER_BYTES - 16)  # under the size cap, but a million maps

    def refuse() -> None:
        with pytest.raises(WireError, match="maps and lists"):
            decode([head])

    assert traced_peak(refuse) < 8 << 20


def test_decode_rejects_deeply_nested_headers():
    def nested(depth: int) -> dict[str, Any]:
        value: dict[str, Any] = {}
        for _ in range(depth):
            value = {"x": value}
        return value

    decode(frames_for(header(meta=nested(10)), b"abc"))
    deep_list: list[Any] = [1]
    for _ in range(40):
        deep_list = [deep_list]
    for meta in (nested(100), {"x": deep_list}):
        with pytest.raises(WireError, match="deeper"):
            decode(frames_for(header(meta=meta), b"abc"))


def test_decode_rejects_policy_versions_outside_int64():
    for version in (-(1 << 63), (1 << 63) - 1):
        assert decode(frames_for(header(policy_version=version), b"abc")).policy_version == version
    for version in (1 << 63, (1 << 64) - 1):
        with pytest.raises(WireError, match="int64"):
            decode(frames_for(header(policy_version=version), b"abc"))


def test_decode_rejects_a_bool_or_float_schema_and_repeated_array_names():
    for schema in (True, 1.0):
        with pytest.raises(WireError, match="schema"):
            decode(frames_for(header(schema=schema), b"abc"))
    with pytest.raises(WireError, match="one name"):
        decode(frames_for(header(arrays=[["a", "|u1", [3]], ["a", "|u1", [1]]]), b"abc", b"d"))


@pytest.mark.parametrize("frames", [[msgpack.packb(header()), 3], [msgpack.packb(header()), None], [None], [7],
                                    [msgpack.packb(header()), np.zeros((2, 2), np.uint8)[:, :1]]],
                         ids=["int frame", "none frame", "none header", "int header", "strided frame"])
def test_decode_raises_only_wire_error_for_frames_that_are_not_byte_buffers(frames):
    with pytest.raises(WireError):
        decode(frames)


def test_receivers_survive_an_empty_array_with_an_absurd_shape(context, closing):
    absurd = EMPTY_BUT_ABSURD["zero first"]
    receiver, push = receiver_and_raw_push(context, closing)
    push.send_multipart(frames_for(header(arrays=[absurd]), b""))
    push.send_multipart(encode(valid_experience(3)))
    message = receiver.receive(timeout_ms=5000)
    assert message is not None and message.policy_version == 3 and receiver.malformed == 1

    publisher = WeightPublisher(context)
    closing.append(publisher)
    publisher.publish(1, weights(1))
    subscriber = WeightSubscriber(context, publisher.address)
    closing.append(subscriber)
    assert_weights(wait_for(publisher, [subscriber])[0], 1)
    absurd_weights = frames_for(header(kind="weights", policy_version=2, arrays=[absurd]), b"")
    publisher.socket.send_multipart([WEIGHTS_TOPIC, *absurd_weights])
    publisher.publish(3, weights(3))
    deadline, got = time.monotonic() + DEADLINE_SECONDS, None
    while got is None:
        assert time.monotonic() < deadline
        got = subscriber.poll(timeout_ms=50)
    assert_weights(got, 3)
    assert subscriber.dropped == 1


def test_a_publisher_neither_sends_nor_keeps_frames_its_subscribers_would_reject(context, closing):
    publisher = WeightPublisher(context)
    closing.append(publisher)
    publisher.publish(1, weights(1))
    kept = publisher._latest
    absurd = frames_for(header(kind="weights", policy_version=2, arrays=[EMPTY_BUT_ABSURD["zero first"]]), b"")
    for version, frames in ((2, absurd), (4, [bytes(frame) for frame in encode(Message("weights", "x", 3))])):
        with pytest.raises(WireError):
            publisher.publish_frames(version, frames)
    assert publisher._latest is kept and publisher.version == 1


# Fuzzing a live PULL socket

FUZZ_MESSAGES = 10_000
FUZZ_VALID = 100
FUZZ_CHUNK = 250
MAP_PREFIXES = set(range(0x80, 0x90)) | {0xDE, 0xDF}


def valid_experience(index: int) -> Message:
    arrays = {"obs": np.full((2, 3), index % 256, np.uint8), "reward": np.arange(3, dtype=np.float32) + index,
              "done": np.array([index % 2 == 0, False, True])}
    return Message(EXPERIENCE, f"actor-{index % 4}", index, arrays, {"index": index})


def garbage(rng: np.random.Generator, base: list[bytes]) -> list[bytes]:
    """A multipart message of 1..5 frames that breaks the wire format in a way that cannot be valid by chance."""
    head = msgpack.unpackb(base[0])
    choice = int(rng.integers(0, 8))
    if choice == 0:  # random bytes whose first byte cannot start a msgpack map
        first = int(rng.choice([b for b in range(256) if b not in MAP_PREFIXES]))
        return [bytes([first]) + rng.bytes(int(rng.integers(0, 40)))] + [rng.bytes(int(rng.integers(0, 20)))
                                                                          for _ in range(int(rng.integers(0, 5)))]
    if choice == 1:  # a valid header with frames missing
        return base[:int(rng.integers(1, len(base)))]
    if choice == 2:  # a valid message with a frame too many
        return base + [rng.bytes(int(rng.integers(0, 8)))]
    if choice in (3, 4):  # one buffer truncated or extended by at least one byte
        frames = list(base)
        index = int(rng.integers(1, len(frames)))
        cut = int(rng.integers(1, len(frames[index]) + 1))
        frames[index] = frames[index][:-cut] if choice == 3 else frames[index] + rng.bytes(cut)
        return frames
    if choice == 5:  # the header cut short
        return [base[0][:int(rng.integers(0, len(base[0])))]] + base[1:]
    if choice == 6:  # a header field broken on purpose
        key = list(BAD_FIELDS)[int(rng.integers(0, len(BAD_FIELDS)))]
        if "many" in key:
            key = "schema 2"
        return [msgpack.packb({**head, **BAD_FIELDS[key]})] + base[1:]
    while True:  # random bytes flipped in the header, kept only when decode rejects them
        mutated = bytearray(base[0])
        for position in rng.integers(0, len(mutated), size=int(rng.integers(1, 4))):
            mutated[position] = int(rng.integers(0, 256))
        frames = [bytes(mutated)] + base[1:]
        try:
            decode(frames, known_kinds={EXPERIENCE})
        except WireError:
            return frames


def test_fuzzed_pull_socket_returns_exactly_the_valid_messages(context, closing):
    rng = np.random.default_rng(20240611)
    receiver, push = receiver_and_raw_push(context, closing)
    base = [bytes(frame) for frame in encode(valid_experience(12345))]
    valid_at = set(rng.choice(FUZZ_MESSAGES + FUZZ_VALID, size=FUZZ_VALID, replace=False).tolist())
    expected, received = [], []
    sent = 0
    for position in range(FUZZ_MESSAGES + FUZZ_VALID):
        if position in valid_at:
            expected.append(valid_experience(len(expected)))
            frames = encode(expected[-1])
        else:
            frames = garbage(rng, base)
        push.send_multipart(frames, flags=zmq.NOBLOCK)
        sent += 1
        if sent % FUZZ_CHUNK == 0 or position == FUZZ_MESSAGES + FUZZ_VALID - 1:
            deadline = time.monotonic() + DEADLINE_SECONDS
            while receiver.malformed + len(received) < sent:
                assert time.monotonic() < deadline, f"only {receiver.malformed + len(received)} of {sent} arrived"
                message = receiver.receive(timeout_ms=20)
                if message is not None:
                    received.append(message)
    assert len(received) == FUZZ_VALID and receiver.received == FUZZ_VALID
    assert receiver.malformed == FUZZ_MESSAGES
    for message, want in zip(received, expected):
        assert_same(message, want)
    sender = ExperienceSender(context, receiver.address)
    closing.append(sender)
    assert sender.send(valid_experience(777), timeout_ms=2000)
    after = receiver.receive(timeout_ms=5000)
    assert after is not None and after.policy_version == 777


def test_receive_keeps_waiting_after_a_malformed_message(context, closing):
    receiver, push = receiver_and_raw_push(context, closing)
    sender = ExperienceSender(context, receiver.address)
    closing.append(sender)
    push.send(b"\xc1 not a message")
    assert receiver.socket.poll(5000)
    timer = threading.Timer(0.5, sender.send, args=(valid_experience(1),))
    timer.start()
    try:
        message = receiver.receive(timeout_ms=5000)
    finally:
        timer.join()
    receiver.receive(timeout_ms=2000)
    assert message is not None and message.policy_version == 1


def test_receiver_survives_crafted_shapes(context, closing):
    receiver, push = receiver_and_raw_push(context, closing)
    push.send_multipart(frames_for(header(arrays=[["a", "|u1", [1 << 30, 1 << 30, 16]]]), b""))
    push.send_multipart(frames_for(header(arrays=[["a", "|u1", [True, 3]]]), b"abc"))
    push.send_multipart(encode(valid_experience(3)))
    try:
        message = receiver.receive(timeout_ms=5000)
    finally:
        while receiver.socket.poll(200):
            receiver.socket.recv_multipart()
    assert message is not None and message.policy_version == 3
    assert receiver.malformed == 2


# Weights

def weights(version: int) -> dict[str, np.ndarray]:
    return {"w": np.full((4, 3), version, np.float32), "b": np.arange(3, dtype=np.float64) * version}


def wait_for(publisher: WeightPublisher, subscribers: list[WeightSubscriber]) -> list[Message]:
    """Serve joins until every subscriber has a message; the publisher never sleeps."""
    got: list[Message | None] = [None] * len(subscribers)
    deadline = time.monotonic() + DEADLINE_SECONDS
    while any(message is None for message in got):
        assert time.monotonic() < deadline, "a subscriber got no weights"
        publisher.serve_joins()
        for index, subscriber in enumerate(subscribers):
            if got[index] is None:
                got[index] = subscriber.poll(timeout_ms=5)
    return got  # type: ignore[return-value]


def assert_weights(message: Message, version: int) -> None:
    assert message.kind == "weights" and message.policy_version == version
    assert message.arrays.keys() == {"w", "b"}
    for name, array in weights(version).items():
        np.testing.assert_array_equal(message.arrays[name], array)
        assert message.arrays[name].dtype == array.dtype


def test_late_subscribers_get_the_newest_weights(context, closing):
    publisher = WeightPublisher(context)
    closing.append(publisher)
    for version in (1, 2, 3):
        publisher.publish(version, weights(version))
    first = WeightSubscriber(context, publisher.address)
    closing.append(first)
    (message,) = wait_for(publisher, [first])
    assert_weights(message, 3)
    assert first.version == 3
    late = [WeightSubscriber(context, publisher.address) for _ in range(2)]
    closing.extend(late)
    for message in wait_for(publisher, late):
        assert_weights(message, 3)
    assert publisher.joins_served == 3
    assert first.poll(timeout_ms=50) is None


def test_a_join_sends_the_weights_to_the_joiner_alone(context, closing):
    """At a start of N actors, N copies of the weights, not one to everyone already there per join."""
    publisher = WeightPublisher(context)
    closing.append(publisher)
    early = WeightSubscriber(context, publisher.address)  # joins before there are weights
    closing.append(early)
    events = set()
    while len(events) < 2 and publisher.socket.poll(int(DEADLINE_SECONDS * 1000)):
        events.add(publisher.socket.recv())
    assert events == {b"\x01" + WEIGHTS_TOPIC, b"\x01" + early.topic}  # the broadcasts, and its own topic
    publisher.publish(3, weights(3))
    assert_weights(wait_for(publisher, [early])[0], 3)  # the first broadcast reaches it
    joined = [early]
    for count in range(1, 5):
        joiner = WeightSubscriber(context, publisher.address)
        closing.append(joiner)
        assert_weights(wait_for(publisher, [joiner])[0], 3)
        assert publisher.joins_served == count
        for earlier in joined:
            assert not earlier.socket.poll(200), "a subscriber was sent the weights again when another joined"
        joined.append(joiner)
    publisher.publish(4, weights(4))
    for subscriber in joined:  # broadcasts still reach everyone, once
        assert subscriber.socket.poll(int(DEADLINE_SECONDS * 1000))
        assert_weights(subscriber.poll(), 4)
        assert not subscriber.socket.poll(100)
        assert subscriber.dropped == 0


def test_subscriber_skips_stale_versions_and_keeps_the_newest_of_a_burst(context, closing):
    publisher = WeightPublisher(context)
    closing.append(publisher)
    publisher.publish(5, weights(5))
    subscriber = WeightSubscriber(context, publisher.address)
    closing.append(subscriber)
    assert_weights(wait_for(publisher, [subscriber])[0], 5)
    publisher.publish(4, weights(4))
    assert subscriber.socket.poll(5000)  # version 4 has arrived
    assert subscriber.poll() is None
    assert subscriber.version == 5
    for version in (6, 7, 8):
        publisher.publish(version, weights(version))
    assert subscriber.socket.poll(5000)
    time.sleep(0.2)  # subscriber side only: let the rest of the burst land
    message = subscriber.poll()
    assert message is not None
    assert_weights(message, 8)
    assert subscriber.poll(timeout_ms=50) is None
    assert subscriber.dropped == 0


def test_subscriber_drops_malformed_weights_and_keeps_going(context, closing):
    publisher = WeightPublisher(context)
    closing.append(publisher)
    publisher.publish(1, weights(1))
    subscriber = WeightSubscriber(context, publisher.address)
    closing.append(subscriber)
    assert_weights(wait_for(publisher, [subscriber])[0], 1)
    publisher.socket.send_multipart([WEIGHTS_TOPIC, b"\xc1 garbage"])
    publisher.socket.send_multipart([WEIGHTS_TOPIC, *frames_for(header(kind="weights"), b"ab")])
    publisher.socket.send_multipart([WEIGHTS_TOPIC, *frames_for(header(kind="experience"), b"abc")])
    publisher.socket.send(WEIGHTS_TOPIC)  # a topic and nothing after it
    valid = encode(Message("weights", "learner", 9, weights(9)))
    publisher.socket.send_multipart([WEIGHTS_TOPIC + b"x", *valid])  # matches the broadcast topic's prefix only
    publisher.socket.send_multipart([subscriber.topic + b"x", *valid])  # and the subscriber's own
    publisher.publish(2, weights(2))
    deadline = time.monotonic() + DEADLINE_SECONDS
    message = None
    while message is None:
        assert time.monotonic() < deadline
        message = subscriber.poll(timeout_ms=50)
    assert_weights(message, 2)
    assert subscriber.dropped == 6


# Closing

def test_closing_a_sender_with_queued_messages_and_no_peer_does_not_hang():
    context = zmq.Context()
    receiver = ExperienceReceiver(context, {EXPERIENCE})
    gone = ExperienceSender(context, receiver.address)
    assert gone.send(valid_experience(0), timeout_ms=2000)
    assert receiver.receive(timeout_ms=5000) is not None
    receiver.close()
    probe = context.socket(zmq.PULL)
    nowhere = bind_random(probe)
    probe.close()
    never = ExperienceSender(context, nowhere)
    queued = {"gone": 0, "never": 0}
    for name, sender in (("gone", gone), ("never", never)):
        for index in range(50):
            if not sender.send(valid_experience(index), timeout_ms=0):
                break
            queued[name] += 1
    assert queued["never"] >= 1
    finished = threading.Event()

    def close_all() -> None:
        gone.close()
        never.close()
        context.term()
        finished.set()

    start = time.monotonic()
    threading.Thread(target=close_all, daemon=True).start()
    assert finished.wait(5.0), "closing sockets with queued messages hung"
    assert time.monotonic() - start < 1.0


def test_a_publisher_closed_part_way_through_a_message_survives_its_subscribers_dropping():
    """The end of a run: the learner's publisher closes while its connections are still sending a
    weights message (a 4 MB array frame with more frames after it), and its subscribers' connections
    drop a moment later. libzmq 4.3.5 aborted the process there in about one close in ten when the
    socket closed with linger 0 (session_base.cpp:233, clean_pipes: `CLOSE_LINGER_MS`). Repeated in a
    process of its own (tests/publisher_close.py), since an abort takes the process with it."""
    script = Path(__file__).with_name("publisher_close.py")
    done = subprocess.run([sys.executable, str(script), "--iterations", "60"], capture_output=True, text=True,
                          timeout=100)
    assert done.returncode != -signal.SIGABRT, f"libzmq aborted the process: {done.stderr[-2000:]}"
    assert done.returncode == 0, done.stderr[-2000:]
    assert "closed 60 publishers" in done.stdout
