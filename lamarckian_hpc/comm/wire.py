"""The wire format between processes: a msgpack header frame followed by raw array frames.

Frame 0 is a msgpack map: kind, schema version, policy version, sender, a small `meta` map and,
for every array, its name, dtype and shape. Frames 1..n are the arrays' bytes, sent from the
arrays' own memory and read back as views of the received frames (no copy either way).

Decoding trusts nothing: msgpack never builds objects other than plain maps, lists, strings and
numbers, dtypes come from a fixed list (never `object`), every shape is checked against its frame's
length and a size cap before a view is made. Nothing is ever unpickled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import msgpack
import numpy as np

SCHEMA_VERSION = 1
MAX_ARRAYS = 256
MAX_ARRAY_BYTES = 1 << 30
MAX_DIMENSIONS = 8
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
    return name, np.dtype(dtype), tuple(shape)


def read_header(frames: Sequence[Any], known_kinds: frozenset[str] | set[str] | None = None) -> dict[str, Any]:
    """Check a message without touching its arrays: the header, the frame count and each array
    frame's length against its descriptor. A relay forwards the frames of a message that passes."""
    if not frames:
        raise WireError("empty message")
    try:
        header = msgpack.unpackb(_bytes_of(frames[0]), raw=False, strict_map_key=True, max_str_len=1 << 16,
                                 max_bin_len=1 << 16, max_array_len=4096, max_map_len=1024, max_ext_len=0,
                                 ext_hook=_refuse_ext)
    except Exception as error:  # msgpack raises several unrelated types on garbage
        raise WireError(f"header is not msgpack: {type(error).__name__}") from None
    if not isinstance(header, dict):
        raise WireError("header is not a map")
    if header.get("schema") != SCHEMA_VERSION:
        raise WireError(f"schema version {header.get('schema')!r}, expected {SCHEMA_VERSION}")
    kind, sender, version = header.get("kind"), header.get("sender"), header.get("policy_version")
    meta, descriptors = header.setdefault("meta", {}), header.get("arrays")
    if not isinstance(kind, str) or (known_kinds is not None and kind not in known_kinds):
        raise WireError(f"unknown kind {kind!r}")
    if not isinstance(sender, str) or type(version) is not int or not isinstance(meta, dict):
        raise WireError("header fields have wrong types")
    if not isinstance(descriptors, list) or len(descriptors) > MAX_ARRAYS:
        raise WireError("bad array list")
    if len(frames) != 1 + len(descriptors):
        raise WireError(f"{len(frames) - 1} array frames for {len(descriptors)} arrays")
    checked = []
    for descriptor, frame in zip(descriptors, frames[1:]):
        name, dtype, shape = _check_descriptor(descriptor)
        expected = dtype.itemsize * math.prod(shape)  # Python ints: no overflow on crafted shapes
        if expected > MAX_ARRAY_BYTES:
            raise WireError(f"array {name!r}: {expected} bytes is over the cap")
        nbytes = _buffer_of(frame).nbytes
        if nbytes != expected:
            raise WireError(f"array {name!r}: {nbytes} bytes for shape {shape} of {dtype}")
        checked.append((name, dtype, shape))
    header["arrays"] = checked
    return header


def decode(frames: Sequence[Any], known_kinds: frozenset[str] | set[str] | None = None) -> Message:
    """Parse frames (bytes, or zmq.Frame with `.buffer`); arrays are read-only views of the frames."""
    header = read_header(frames, known_kinds)
    arrays: dict[str, np.ndarray] = {}
    for (name, dtype, shape), frame in zip(header["arrays"], frames[1:]):
        if dtype.itemsize * math.prod(shape):
            arrays[name] = np.frombuffer(_buffer_of(frame), dtype=dtype).reshape(shape)
        else:
            arrays[name] = np.empty(shape, dtype)
    return Message(header["kind"], header["sender"], header["policy_version"], arrays, header["meta"])


def _refuse_ext(code: int, data: bytes) -> Any:
    raise WireError(f"msgpack extension type {code} in a header")


def _buffer_of(frame: Any) -> memoryview:
    """A read-only byte view: nobody may change a received buffer under another reader."""
    view = memoryview(frame.buffer if hasattr(frame, "buffer") else frame)
    view = view.cast("B") if view.format != "B" or view.ndim != 1 else view
    return view.toreadonly()


def _bytes_of(frame: Any) -> bytes:
    return frame.bytes if hasattr(frame, "bytes") else bytes(frame)

