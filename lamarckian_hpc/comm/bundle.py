"""Bundles: many experience-channel messages sent up the relay tree as one.

Every message a ZeroMQ socket takes costs its receiver a wake-up, a receive and, with CURVE, a
decryption per frame, whatever its size. A learner fed by relays that forward message by message
therefore pays that for every rollout of every actor (0.20-0.27 ms of CPU a message at fan-in,
`docs/benchmarks/fan_in.md`). A relay instead gathers what comes up for a few milliseconds
(`Bundler`) and sends it on as one bundle: the learner (`ExperienceReceiver`) then takes one
message per relay batch, unpacks it and handles each part as if it had come alone, so credits are
still spent and granted per actor and rollout (`comm.credits`).

A bundle is three frames: `BUNDLE_MARKER`; a msgpack header, a map {"parts": [[route, lengths],
...]} where `route` lists the routing ids between the relay and the part's sender (the sender's
last) and `lengths` the byte length of each of the part's frames; and one payload frame, the
parts' frames laid end to end. One payload frame, not the parts' own frames: CURVE encrypts and
decrypts frame by frame, so a relay batch is one cipher operation on each side. The parts are
read back as views of the payload (no copy); the relay copies each part once, into the payload.

The relay does not re-encode the parts (decode every rollout and lay their arrays end to end):
it stays ignorant of what the messages hold (experience, hellos, gradients, credit requests),
the learner still checks every part with the wire decoder, and a malformed part is dropped and
counted alone instead of spoiling its neighbours. A bundle's header is checked like a message's:
its size before it is unpacked, the number of parts and frames, each route and length, and that
the lengths add up to the payload; a bundle that fails any check is dropped whole and counted.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import msgpack

from .wire import MAX_ARRAYS, MAX_HEADER_BYTES, WireError

#: The first frame of a bundle (after the empty frame of the experience channel); no wire-format
#: header starts with a zero byte (a msgpack map does not), so it cannot be taken for a message.
BUNDLE_MARKER = b"\x00lamarckian-bundle/1"
#: Parts of one bundle at most, and frames over all its parts: what a learner unpacks per receive.
MAX_BUNDLE_PARTS = 1024
MAX_BUNDLE_FRAMES = 16_384
#: Frames of one part at most: a wire-format message's header and arrays.
MAX_PART_FRAMES = 1 + MAX_ARRAYS
#: Routing ids of one part's route at most (relays below, then the sender): a learner's whole
#: route holds at most `channels.MAX_ROUTE_FRAMES`, the first of which its ROUTER adds.
MAX_PART_ROUTE = 3
MAX_ROUTING_ID_BYTES = 255
#: What a relay gathers before it sends, by default: bytes and milliseconds.
DEFAULT_BUNDLE_BYTES = 1 << 20
DEFAULT_BUNDLE_WAIT_MS = 3.0

Route = tuple[bytes, ...]
Part = tuple[Route, list[Any]]


def _nbytes(frame: Any) -> int:
    if hasattr(frame, "buffer"):
        return frame.buffer.nbytes
    return memoryview(frame).nbytes


def is_bundle(frames: Sequence[Any]) -> bool:
    """Whether these message frames (after the route) are a bundle; looks at the first frame only."""
    if not frames:
        return False
    first = frames[0]
    if _nbytes(first) != len(BUNDLE_MARKER):
        return False
    return (first.bytes if hasattr(first, "bytes") else bytes(first)) == BUNDLE_MARKER


def pack_bundle(parts: Sequence[Part]) -> list[Any]:
    """The frames of a bundle of `parts` (route below this relay, message frames)."""
    if not 0 < len(parts) <= MAX_BUNDLE_PARTS:
        raise ValueError(f"a bundle holds 1 to {MAX_BUNDLE_PARTS} parts, got {len(parts)}")
    described, buffers = [], []
    for route, frames in parts:
        views = [memoryview(f.buffer if hasattr(f, "buffer") else f).cast("B") for f in frames]
        described.append([list(route), [view.nbytes for view in views]])
        buffers.extend(views)
    header = msgpack.packb({"parts": described}, use_bin_type=True)
    return [BUNDLE_MARKER, header, b"".join(buffers)]


def unpack_bundle(frames: Sequence[Any]) -> list[Part]:
    """The parts of a bundle: (route below the relay that sent it, frames as read-only views of
    the payload). Raises WireError, and nothing else, for a bundle that is not well formed."""
    if len(frames) != 3 or not is_bundle(frames):
        raise WireError(f"a bundle is marker, header and payload: got {len(frames)} frames")
    size = _nbytes(frames[1])
    if size > MAX_HEADER_BYTES:
        raise WireError(f"bundle header of {size} bytes is over the {MAX_HEADER_BYTES} byte cap")
    header_bytes = frames[1].bytes if hasattr(frames[1], "bytes") else bytes(frames[1])
    built = 0

    def count(container: Any) -> Any:  # a real header holds three lists a part and one map
        nonlocal built
        built += 1
        if built > 3 * MAX_BUNDLE_PARTS + 2:
            raise WireError("bundle header holds more lists than its parts can")
        return container

    try:
        header = msgpack.unpackb(header_bytes, raw=False, strict_map_key=True, max_str_len=64,
                                 max_bin_len=MAX_ROUTING_ID_BYTES, max_array_len=max(MAX_BUNDLE_PARTS, MAX_PART_FRAMES),
                                 max_map_len=4, max_ext_len=0, object_hook=count, list_hook=count)
    except WireError:
        raise
    except Exception as error:  # msgpack raises several unrelated types on garbage
        raise WireError(f"bundle header is not msgpack: {type(error).__name__}") from None
    parts = header.get("parts") if isinstance(header, dict) else None
    if not isinstance(parts, list) or not 0 < len(parts) <= MAX_BUNDLE_PARTS:
        raise WireError(f"a bundle names 1 to {MAX_BUNDLE_PARTS} parts")
    payload = memoryview(frames[2].buffer if hasattr(frames[2], "buffer") else frames[2]).cast("B").toreadonly()
    checked: list[tuple[Route, list[int]]] = []
    total_frames = total_bytes = 0
    for part in parts:
        if not (isinstance(part, list) and len(part) == 2 and isinstance(part[0], list) and isinstance(part[1], list)):
            raise WireError("a bundle part is not [route, lengths]")
        route, lengths = part
        if not 0 < len(route) <= MAX_PART_ROUTE or not all(type(r) is bytes and r for r in route):
            raise WireError(f"a bundle part's route is 1 to {MAX_PART_ROUTE} routing ids")
        if not 0 < len(lengths) <= MAX_PART_FRAMES or not all(type(n) is int and n >= 0 for n in lengths):
            raise WireError(f"a bundle part has 1 to {MAX_PART_FRAMES} frames of lengths >= 0")
        total_frames += len(lengths)
        if total_frames > MAX_BUNDLE_FRAMES:
            raise WireError(f"a bundle of more than {MAX_BUNDLE_FRAMES} frames")
        total_bytes += sum(lengths)
        checked.append((tuple(route), lengths))
    if total_bytes != payload.nbytes:
        raise WireError(f"bundle parts of {total_bytes} bytes in a payload of {payload.nbytes}")
    unpacked: list[Part] = []
    offset = 0
    for route, lengths in checked:
        views = []
        for length in lengths:
            views.append(payload[offset:offset + length])
            offset += length
        unpacked.append((route, views))
    return unpacked


@dataclass
class Bundler:
    """A relay's batch on its way up: parts gathered until the next would pass `max_bytes`,
    `MAX_BUNDLE_PARTS` or `MAX_BUNDLE_FRAMES`, or the first has waited `wait_ms`. `wait_ms` 0: every
    part is sent as it comes (what a relay did before bundles), never waiting."""

    max_bytes: int = DEFAULT_BUNDLE_BYTES
    wait_ms: float = DEFAULT_BUNDLE_WAIT_MS
    parts: list[Part] = field(default_factory=list)
    frames: int = 0
    bytes: int = 0
    first_at: float = 0.0

    def fits(self, part: Part) -> bool:
        """Whether `part` may join the batch without passing a bound (an empty batch takes anything)."""
        if not self.parts:
            return True
        return (len(self.parts) < MAX_BUNDLE_PARTS and self.frames + len(part[1]) <= MAX_BUNDLE_FRAMES
                and self.bytes + sum(_nbytes(f) for f in part[1]) <= self.max_bytes)

    def add(self, part: Part) -> None:
        if not self.parts:
            self.first_at = time.monotonic()
        self.parts.append(part)
        self.frames += len(part[1])
        self.bytes += sum(_nbytes(f) for f in part[1])

    def due_in(self, now: float | None = None) -> float | None:
        """Seconds until the batch must go (0: now), None when it is empty."""
        if not self.parts:
            return None
        now = time.monotonic() if now is None else now
        return max(0.0, self.first_at + self.wait_ms / 1000 - now)

    def take(self) -> list[Part]:
        parts, self.parts, self.frames, self.bytes = self.parts, [], 0, 0
        return parts
