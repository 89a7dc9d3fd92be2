"""The wire format between processes: a msgpack header frame followed by raw array frames.

Frame 0 is a msgpack map: kind, schema version, policy version, sender, a small `meta` map and,
for every array, its name, dtype and shape. Frames 1..n are the arrays' bytes, sent from the
arrays' own memory and read back as views of the received frames (no copy either way). On the
weights channel one topic frame goes in front of these (`comm.channels`: which subscribers a
message is for); the subscriber checks it and takes it off, and `decode` sees the frames after it.

Decoding trusts nothing, and every way a message can be wrong ends in `WireError`, never in an
exception a receiver does not expect: the header's size is checked before it is unpacked (a few
kilobytes of msgpack can otherwise describe millions of objects), msgpack never builds objects
other than plain maps, lists, strings and numbers, and their nesting is bounded; dtypes come from a
fixed list (never `object`); every shape is checked against its frame's length and a size cap, zero-size
shapes included (numpy refuses to describe an empty array whose other dimensions overflow), before a
view is made. Nothing is ever unpickled.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np

SCHEMA_VERSION = 1
MAX_ARRAYS = 256
MAX_ARRAY_BYTES = 1 << 30
MAX_DIMENSIONS = 8
#: A header describes at most MAX_ARRAYS arrays and a `meta` map: kilobytes on the network; the
#: forked workers' requests and replies (`population.pipe_messages`) carry up to a few lists of thousands of
#: episode returns. The size is checked before unpacking, and the maps and lists built while
#: unpacking are counted, so a hostile header costs at most a few milliseconds and megabytes.
MAX_HEADER_BYTES = 1 << 20
MAX_HEADER_CONTAINERS = 16_384
#: Maps and lists inside maps and lists: the header itself, `arrays`, a descriptor and its shape are
#: four levels; `meta` may nest several more.
MAX_HEADER_DEPTH = 32
POLICY_VERSION_RANGE = range(-(1 << 63), 1 << 63)  # an int64, as every process stores it
ALLOWED_DTYPES = frozenset(
    np.dtype(name).str
    for name in ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
                 "float16", "float32", "float64")
)


class WireError(ValueError):
    """A message that does not follow the wire format; the receiver drops it and goes on."""


@dataclass(frozen=True)
class Message:
    kind: str
    sender: str
    policy_version: int
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)


def encode(message: Message) -> list[Any]:
    """Frames for `send_multipart(..., copy=False)`: the header, then each array's buffer."""
    descriptors = []
    buffers: list[Any] = []
    for name, array in message.arrays.items():
        contiguous = np.ascontiguousarray(array).reshape(np.shape(array))  # keeps 0-d arrays 0-d
        if contiguous.dtype.str not in ALLOWED_DTYPES:
            raise WireError(f"array {name!r}: dtype {contiguous.dtype} cannot go on the wire")
        descriptors.append([name, contiguous.dtype.str, list(contiguous.shape)])
        buffers.append(memoryview(contiguous).cast("B") if contiguous.size else b"")
    header = {
        "kind": message.kind,
        "schema": SCHEMA_VERSION,
        "policy_version": int(message.policy_version),
        "sender": message.sender,
        "meta": message.meta,
        "arrays": descriptors,
    }
    return [msgpack.packb(header, use_bin_type=True), *buffers]


def _check_descriptor(descriptor: Any) -> tuple[str, np.dtype, tuple[int, ...]]:
    if not (isinstance(descriptor, list) and len(descriptor) == 3):
        raise WireError("array descriptor is not [name, dtype, shape]")
    name, dtype, shape = descriptor
    if not isinstance(name, str) or not isinstance(dtype, str) or not isinstance(shape, list):
        raise WireError("array descriptor has wrong types")
    if dtype not in ALLOWED_DTYPES:
        raise WireError(f"array {name!r}: dtype {dtype!r} not allowed")
    if len(shape) > MAX_DIMENSIONS or not all(type(n) is int and 0 <= n <= MAX_ARRAY_BYTES for n in shape):
        raise WireError(f"array {name!r}: bad shape {shape!r}")
    checked = np.dtype(dtype)
    # Python ints: no overflow on crafted shapes. A zero in the shape makes the array empty, but numpy
    # still refuses (with its own ValueError) to describe one whose other dimensions overflow, so the
    # cap holds for the shape with its zeros taken as ones too.
    if checked.itemsize * math.prod(max(n, 1) for n in shape) > MAX_ARRAY_BYTES:
        raise WireError(f"array {name!r}: shape {shape} of {dtype} is over the {MAX_ARRAY_BYTES} byte cap")
    return name, checked, tuple(shape)


def _unpack_header(frame: Any) -> Any:
    """The header frame, unpacked only when it is small enough, and given up as soon as it has
    built more maps and lists than any real header holds."""
    size = _buffer_of(frame).nbytes
    if size > MAX_HEADER_BYTES:
        raise WireError(f"header of {size} bytes is over the {MAX_HEADER_BYTES} byte cap")
    built = 0

    def count(container: Any) -> Any:
        nonlocal built
        built += 1
        if built > MAX_HEADER_CONTAINERS:
            raise WireError(f"header holds more than {MAX_HEADER_CONTAINERS} maps and lists")
        return container

    try:
        header = msgpack.unpackb(_bytes_of(frame), raw=False, strict_map_key=True, max_str_len=MAX_HEADER_BYTES,
                                 max_bin_len=MAX_HEADER_BYTES, max_array_len=4096, max_map_len=1024, max_ext_len=0,
                                 ext_hook=_refuse_ext, object_hook=count, list_hook=count)
    except WireError:
        raise
    except Exception as error:  # msgpack raises several unrelated types on garbage
        raise WireError(f"header is not msgpack: {type(error).__name__}") from None
    _check_depth(header)
    return header


def _check_depth(value: Any) -> None:
    """Refuse maps and lists nested deeper than MAX_HEADER_DEPTH (walked without recursion)."""
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        for child in children:
            if isinstance(child, (dict, list)):
                if depth >= MAX_HEADER_DEPTH:
                    raise WireError(f"header nests maps and lists deeper than {MAX_HEADER_DEPTH}")
                pending.append((child, depth + 1))


def read_header(frames: Sequence[Any], known_kinds: frozenset[str] | set[str] | None = None) -> dict[str, Any]:
    """Check a message without touching its arrays: the header, the frame count and each array
    frame's length against its descriptor. `decode` builds on it; see there for what relays use."""
    if not frames:
        raise WireError("empty message")
    header = _unpack_header(frames[0])
    if not isinstance(header, dict):
        raise WireError("header is not a map")
    if header.get("schema") != SCHEMA_VERSION or type(header.get("schema")) is not int:
        raise WireError(f"schema version {header.get('schema')!r}, expected {SCHEMA_VERSION}")
    kind, sender, version = header.get("kind"), header.get("sender"), header.get("policy_version")
    meta, descriptors = header.setdefault("meta", {}), header.get("arrays")
    if not isinstance(kind, str) or (known_kinds is not None and kind not in known_kinds):
        raise WireError(f"unknown kind {kind!r}")
    if not isinstance(sender, str) or type(version) is not int or not isinstance(meta, dict):
        raise WireError("header fields have wrong types")
    if version not in POLICY_VERSION_RANGE:
        raise WireError(f"policy version {version} is not an int64")
    if not isinstance(descriptors, list) or len(descriptors) > MAX_ARRAYS:
        raise WireError("bad array list")
    if len(frames) != 1 + len(descriptors):
        raise WireError(f"{len(frames) - 1} array frames for {len(descriptors)} arrays")
    checked = []
    for descriptor, frame in zip(descriptors, frames[1:]):
        name, dtype, shape = _check_descriptor(descriptor)
        expected = dtype.itemsize * math.prod(shape)
        nbytes = _buffer_of(frame).nbytes
        if nbytes != expected:
            raise WireError(f"array {name!r}: {nbytes} bytes for shape {shape} of {dtype}")
        checked.append((name, dtype, shape))
    if len({name for name, _, _ in checked}) != len(checked):
        raise WireError("two arrays with one name")
    header["arrays"] = checked
    return header


def decode(frames: Sequence[Any], known_kinds: frozenset[str] | set[str] | None = None) -> Message:
    """Parse frames (bytes, or zmq.Frame with `.buffer`); arrays are read-only views of the frames.

    Raises `WireError`, and nothing else, for any message that is not well formed: a receiver that
    catches it survives whatever a peer sends. A relay checks what it forwards with this very
    function (views cost no copy), so it passes on exactly the messages its subscribers accept."""
    header = read_header(frames, known_kinds)
    arrays: dict[str, np.ndarray] = {}
    try:
        for (name, dtype, shape), frame in zip(header["arrays"], frames[1:]):
            if dtype.itemsize * math.prod(shape):
                arrays[name] = np.frombuffer(_buffer_of(frame), dtype=dtype).reshape(shape)
            else:
                arrays[name] = np.empty(shape, dtype)
    except (ValueError, TypeError, MemoryError) as error:  # the checks above should leave none
        raise WireError(f"arrays cannot be built: {type(error).__name__}: {error}") from error
    return Message(header["kind"], header["sender"], header["policy_version"], arrays, header["meta"])


def _refuse_ext(code: int, data: bytes) -> Any:
    raise WireError(f"msgpack extension type {code} in a header")


def _buffer_of(frame: Any) -> memoryview:
    """A read-only byte view: nobody may change a received buffer under another reader."""
    try:
        view = memoryview(frame.buffer if hasattr(frame, "buffer") else frame)
        view = view.cast("B") if view.format != "B" or view.ndim != 1 else view
    except TypeError:
        raise WireError(f"a frame of type {type(frame).__name__} is not a contiguous buffer") from None
    return view.toreadonly()


def _bytes_of(frame: Any) -> bytes:
    return frame.bytes if hasattr(frame, "bytes") else bytes(frame)

