"""Property-based fuzzing of the wire decoder: every message `encode` makes decodes to itself, and
whatever else arrives (arbitrary msgpack headers, crafted array descriptors, valid messages with
bytes flipped, frames cut or added, frames that are not even msgpack) ends in a `WireError` or in
a message whose arrays are exactly what their frames hold, never in another exception. The check
a relay makes before forwarding is the one its subscribers make."""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np
import pytest
import zmq
from fuzz_budget import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from lamarckian_hpc.comm import ALLOWED_DTYPES, SCHEMA_VERSION, Message, WeightPublisher, WireError, decode, encode
from lamarckian_hpc.comm.wire import MAX_ARRAY_BYTES

pytestmark = pytest.mark.timeout(300)

#: Bounded and derandomized: seconds per run, and the same examples on every machine.
FUZZ = settings(max_examples=examples(150), deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])
DTYPES = sorted(ALLOWED_DTYPES)
BAD_DTYPES = ["|O", "<U5", "<c16", ">f4", ">u2", "S3", "V3", "<M8[s]", "", "float32", "|b1 "]
INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
#: Dimensions a descriptor may have, up to the per-dimension cap, and ones it may not.
DIMS = st.sampled_from([0, 1, 2, 3, 1 << 15, 1 << 30])
BAD_DIMS = st.sampled_from([-1, (1 << 30) + 1, 1 << 62, (1 << 63) - 1, True, 2.0])

plain = st.recursive(
    st.none() | st.booleans() | INT64 | st.floats(allow_nan=False) | st.text(max_size=12) | st.binary(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=20,
)
#: Anything msgpack can carry, also what a header never should: NaN, uint64, extension types.
anything = st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 63), (1 << 64) - 1) | st.floats() | st.text(max_size=12)
    | st.binary(max_size=12) | st.builds(msgpack.ExtType, st.integers(0, 127), st.binary(max_size=4)),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=20,
)


def depth(value: Any) -> int:
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
    return 0 if children is None else 1 + max((depth(child) for child in children), default=0)


#: A `meta` map an application sends: plain values, nested well within the decoder's depth limit.
metas = st.dictionaries(st.text(max_size=6), plain, max_size=4).filter(lambda meta: depth(meta) < 16)
#: Arrays of every allowed dtype, empty and zero-dimensional ones included.
array_maps = st.dictionaries(
    st.text(min_size=1, max_size=8),
    hnp.arrays(st.sampled_from(DTYPES), hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4)),
    max_size=5,
)


def check_decoded(message: Message, frames: list[Any]) -> None:
    """What any message decode returns satisfies: one array per frame, of an allowed dtype, whose
    bytes are exactly its frame's."""
    assert isinstance(message, Message)
    assert isinstance(message.kind, str) and isinstance(message.sender, str) and isinstance(message.meta, dict)
    assert -(1 << 63) <= message.policy_version < (1 << 63)
    assert len(message.arrays) == len(frames) - 1
    for array, frame in zip(message.arrays.values(), frames[1:]):
        assert array.dtype.str in ALLOWED_DTYPES
        assert array.nbytes == memoryview(frame).nbytes <= MAX_ARRAY_BYTES
        assert array.size == 0 or not array.flags.writeable


def decode_or_reject(frames: list[Any], known_kinds: set[str] | None = None) -> Message | None:
    """decode, where a WireError is the only acceptable failure."""
    try:
        message = decode(frames, known_kinds)
    except WireError:
        return None
    check_decoded(message, frames)
    return message


@FUZZ
@given(arrays=array_maps, meta=metas,
       kind=st.text(max_size=8), sender=st.text(max_size=8), version=INT64)
def test_every_encoded_message_decodes_to_itself(arrays, meta, kind, sender, version):
    message = Message(kind, sender, version, arrays, meta)
    frames = encode(message)
    for received in (frames, [bytes(frame) for frame in frames]):
        decoded = decode(received, known_kinds={kind})
        assert (decoded.kind, decoded.sender, decoded.policy_version, decoded.meta) == (kind, sender, version, meta)
        assert decoded.arrays.keys() == arrays.keys()
        for name, array in arrays.items():
            assert decoded.arrays[name].dtype == array.dtype and decoded.arrays[name].shape == array.shape
            np.testing.assert_array_equal(decoded.arrays[name], array)


headers = st.fixed_dictionaries(
    {},
    optional={
        "kind": st.just("weights") | anything, "schema": st.just(SCHEMA_VERSION) | anything,
        "policy_version": INT64 | anything, "sender": st.text(max_size=8) | anything,
        "meta": st.dictionaries(st.text(max_size=6), anything, max_size=4) | anything,
        "arrays": st.lists(st.lists(anything, max_size=4) | anything, max_size=4) | anything,
    },
) | anything


@FUZZ
@given(head=headers, frames=st.lists(st.binary(max_size=64), max_size=4))
def test_any_msgpack_header_is_decoded_or_rejected_with_a_wire_error(head, frames):
    decode_or_reject([msgpack.packb(head, use_bin_type=True), *frames])


descriptor = st.tuples(st.text(max_size=4), st.sampled_from(DTYPES + BAD_DTYPES),
                       st.lists(DIMS, max_size=9) | st.lists(DIMS | BAD_DIMS, max_size=10)
                       | st.lists(st.integers(-3, 5), max_size=9)).map(list)


@settings(FUZZ, max_examples=examples(400))
@given(descriptors=st.lists(descriptor, min_size=1, max_size=3), data=st.data())
def test_crafted_shapes_and_dtypes_are_decoded_or_rejected_with_a_wire_error(descriptors, data):
    """Frames of the declared size where that is small, else of a drawn size: the size check, the
    zero-size shapes that overflow and the dtype list are all met."""
    frames = []
    for _, dtype, shape in descriptors:
        try:
            size = np.dtype(dtype).itemsize * int(np.prod(shape, dtype=object))
        except (TypeError, ValueError):
            size = -1
        declared = 0 <= size <= 256 and data.draw(st.integers(0, 3)) > 0  # mostly the size it declares
        frames.append(bytes(size) if declared else data.draw(st.binary(max_size=32)))
    head = {"kind": "weights", "schema": SCHEMA_VERSION, "policy_version": 1, "sender": "learner", "meta": {},
            "arrays": descriptors}
    message = decode_or_reject([msgpack.packb(head, use_bin_type=True), *frames])
    if message is not None:
        assert [list(a.shape) for a in message.arrays.values()] == [shape for _, _, shape in descriptors]


def mutations(frames: list[bytes]) -> st.SearchStrategy[list[bytes]]:
    """A valid message's frames, broken the ways a network, a bug or an attacker breaks them."""
    head = frames[0]

    def flip(positions_and_values: list[tuple[int, int]]) -> list[bytes]:
        mutated = bytearray(head)
        for position, value in positions_and_values:
            mutated[position % len(mutated)] = value
        return [bytes(mutated), *frames[1:]]

    index = st.integers(0, len(frames) - 1)
    return st.one_of(
        st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), min_size=1, max_size=4).map(flip),
        st.integers(0, len(head)).map(lambda cut: [head[:cut], *frames[1:]]),
        st.tuples(st.integers(0, len(head)), st.binary(min_size=1, max_size=8)).map(
            lambda at: [head[:at[0]] + at[1] + head[at[0]:], *frames[1:]]),
        st.tuples(index, st.integers(0, 64), st.binary(max_size=8)).map(
            lambda change: [*frames[:change[0]], frames[change[0]][:change[1]] + change[2], *frames[change[0] + 1:]]),
        index.map(lambda drop: frames[:drop] + frames[drop + 1:]),
        st.lists(st.binary(max_size=16), min_size=1, max_size=3).map(lambda extra: frames + extra),
    )


@FUZZ
@given(data=st.data(), arrays=array_maps, version=INT64)
def test_mutated_valid_messages_are_decoded_or_rejected_with_a_wire_error(data, arrays, version):
    frames = [bytes(frame) for frame in encode(Message("weights", "learner", version, arrays, {"env_frames": 3}))]
    decode_or_reject(data.draw(mutations(frames)), known_kinds={"weights"})


@FUZZ
@given(frames=st.lists(st.binary(max_size=80), max_size=5))
def test_random_bytes_are_decoded_or_rejected_with_a_wire_error(frames):
    decode_or_reject(frames)


@pytest.fixture(scope="module")
def publisher():
    context = zmq.Context()
    publisher = WeightPublisher(context)
    yield publisher
    publisher.close()
    context.term()


@settings(FUZZ, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data(), arrays=array_maps, version=st.integers(0, 1 << 40))
def test_a_relay_forwards_exactly_what_its_subscribers_accept(publisher, data, arrays, version):
    """`publish_frames`, through which a relay forwards, takes a message if and only if a
    subscriber's `decode` does, and keeps only what it took as the newest weights."""
    frames = [bytes(frame) for frame in encode(Message("weights", "learner", version, arrays))]
    frames = data.draw(st.just(frames) | mutations(frames))
    accepted = decode_or_reject(frames, known_kinds={"weights"})
    kept = publisher._latest
    try:
        publisher.publish_frames(accepted.policy_version if accepted is not None else version, frames)
    except WireError:
        assert accepted is None and publisher._latest is kept
    else:
        assert accepted is not None and publisher._latest is frames
