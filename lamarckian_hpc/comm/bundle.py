"""Bundles: many experience-channel messages sent up the relay tree as one.

Every message costs its receiver a wake-up, a receive, a decryption per frame and a check of its
header (`wire.decode`: about 40-100 us of Python for a CartPole rollout's ten arrays), whatever its
size. A learner fed by relays that forward message by message pays that for every rollout of
every actor (0.20-0.27 ms of CPU a message at fan-in, `docs/benchmarks/fan_in.md`). A relay instead
gathers what comes up for a few milliseconds (`Bundler`) and sends it on as one bundle; the learner
(`ExperienceReceiver`) decodes the bundle once, cuts it into its parts and handles each as if it
had come alone, so credits are still spent and granted per actor and rollout (`comm.credits`).

A bundle is itself one wire-format message (kind `bundle`), re-encoded by the relay: the parts
whose arrays have the same names, dtypes and shapes but the first (a group: an actor's rollouts,
say, or its credit requests, which have none) have each array laid end to end along the first
axis, as array `<group>:<name>`; the header's meta lists the groups' array names and, per part,
its group, its route below the relay (routing ids of the relays on the way, the sender's last),
its kind, sender, policy version, meta and the rows it holds of each of its group's arrays. The
learner makes each part's arrays as views of the bundle's (no copy), so one decode, with every
check of the wire format, serves all the parts. Measured against bundling the parts' frames as
they are (`docs/benchmarks/fan_in.md`): that saved the learner its receives but not a decode per
part, which was most of its cost. The relay pays the decode of each part, on its own node's core,
and one copy into the bundle; it still knows nothing of what the messages hold.

Everything a bundle says is checked before a part is made (`unbundle`): the groups and parts
within their bounds, each route, kind, sender, version and meta of the right type, and each
array's rows adding up to its length; a bundle that fails is dropped whole and counted, and a
part whose kind the receiver does not take is dropped and counted alone. A part whose arrays
cannot be laid end to end (a 0-d array) travels alone, as a relay forwarded before bundles.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .wire import MAX_ARRAYS, POLICY_VERSION_RANGE, Message, WireError

BUNDLE = "bundle"
#: Parts of one bundle at most: what a learner unpacks per receive.
MAX_BUNDLE_PARTS = 1024
#: Routing ids of one part's route at most (relays below, then the sender): a learner's whole
#: route holds at most `channels.MAX_ROUTE_FRAMES`, the first of which its ROUTER adds.
MAX_PART_ROUTE = 3
MAX_ROUTING_ID_BYTES = 255
#: What a relay gathers before it sends, by default: bytes and milliseconds.
DEFAULT_BUNDLE_BYTES = 1 << 20
DEFAULT_BUNDLE_WAIT_MS = 3.0

Route = tuple[bytes, ...]
#: A message on its way up: the routing ids below the relay that holds it, and the message.
Part = tuple[Route, Message]


def _signature(message: Message) -> tuple[Any, ...] | None:
    """The group key of a message: its arrays' names, dtypes and shapes but the first; None when
    an array has no first axis to lay it along."""
    if any(array.ndim == 0 for array in message.arrays.values()):
        return None
    return tuple((name, array.dtype.str, array.shape[1:]) for name, array in message.arrays.items())


def stackable(message: Message) -> bool:
    return _signature(message) is not None


def part_bytes(message: Message) -> int:
    return sum(array.nbytes for array in message.arrays.values()) + 64 + 16 * len(message.arrays)


def bundle(parts: Sequence[Part], sender: str) -> Message:
    """One message of `parts` (each `stackable`), arrays of a group laid end to end."""
    if not 0 < len(parts) <= MAX_BUNDLE_PARTS:
        raise ValueError(f"a bundle holds 1 to {MAX_BUNDLE_PARTS} parts, got {len(parts)}")
    groups: dict[tuple[Any, ...], int] = {}
    members: list[list[Message]] = []
    described = []
    for route, message in parts:
        signature = _signature(message)
        if signature is None:
            raise ValueError(f"a {message.kind} message with a 0-d array cannot be bundled")
        group = groups.setdefault(signature, len(groups))
        if group == len(members):
            members.append([])
        members[group].append(message)
        described.append([group, list(route), message.kind, message.sender, message.policy_version, message.meta,
                          [len(array) for array in message.arrays.values()]])
    arrays: dict[str, np.ndarray] = {}
    names = []
    for group, messages in enumerate(members):
        names.append(list(messages[0].arrays))
        for name in messages[0].arrays:
            arrays[f"{group}:{name}"] = np.concatenate([message.arrays[name] for message in messages])
    if len(arrays) > MAX_ARRAYS:
        raise ValueError(f"a bundle of {len(arrays)} arrays; at most {MAX_ARRAYS}")
    return Message(BUNDLE, sender, -1, arrays, {"groups": names, "parts": described})


def unbundle(message: Message) -> list[Part]:
    """The parts of a decoded bundle, their arrays views of the bundle's. Raises WireError, and
    nothing else, for a bundle that does not add up."""
    groups, parts = message.meta.get("groups"), message.meta.get("parts")
    if not isinstance(groups, list) or not all(isinstance(g, list) and all(isinstance(n, str) for n in g)
                                               for g in groups):
        raise WireError("a bundle's groups are lists of array names")
    if not isinstance(parts, list) or not 0 < len(parts) <= MAX_BUNDLE_PARTS:
        raise WireError(f"a bundle holds 1 to {MAX_BUNDLE_PARTS} parts")
    arrays = message.arrays
    if sum(len(names) for names in groups) != len(arrays):
        raise WireError("a bundle's arrays are not its groups'")
    columns: list[list[np.ndarray]] = []
    for group, names in enumerate(groups):
        try:
            columns.append([arrays[f"{group}:{name}"] for name in names])
        except KeyError as error:
            raise WireError(f"a bundle lacks array {error}") from None
        if any(column.ndim == 0 for column in columns[-1]):
            raise WireError("a bundle's arrays have a first axis")
    offsets = [[0] * len(names) for names in groups]
    checked = []
    for part in parts:
        if not (isinstance(part, list) and len(part) == 7):
            raise WireError("a bundle part is [group, route, kind, sender, version, meta, rows]")
        group, route, kind, sender, version, meta, rows = part
        if type(group) is not int or not 0 <= group < len(groups):
            raise WireError(f"a bundle part names group {group!r} of {len(groups)}")
        if (not isinstance(route, list) or not 0 < len(route) <= MAX_PART_ROUTE
                or not all(type(r) is bytes and 0 < len(r) <= MAX_ROUTING_ID_BYTES for r in route)):
            raise WireError(f"a bundle part's route is 1 to {MAX_PART_ROUTE} routing ids")
        if not isinstance(kind, str) or not isinstance(sender, str) or not isinstance(meta, dict):
            raise WireError("a bundle part's kind, sender or meta has the wrong type")
        if type(version) is not int or version not in POLICY_VERSION_RANGE:
            raise WireError(f"a bundle part's policy version {version!r} is not an int64")
        if (not isinstance(rows, list) or len(rows) != len(groups[group])
                or not all(type(n) is int and n >= 0 for n in rows)):
            raise WireError("a bundle part's rows do not match its group's arrays")
        starts = offsets[group]
        for index, n in enumerate(rows):
            starts[index] += n
        checked.append((group, tuple(route), kind, sender, version, meta, rows))
    for group, ends in enumerate(offsets):
        if any(end != len(column) for end, column in zip(ends, columns[group])):
            raise WireError(f"the rows of group {group}'s parts do not add up to its arrays")
    cursors = [[0] * len(names) for names in groups]
    unbundled: list[Part] = []
    for group, route, kind, sender, version, meta, rows in checked:
        cursor, part_arrays = cursors[group], {}
        for index, (name, n) in enumerate(zip(groups[group], rows)):
            part_arrays[name] = columns[group][index][cursor[index]:cursor[index] + n]
            cursor[index] += n
        unbundled.append((route, Message(kind, sender, version, part_arrays, meta)))
    return unbundled


@dataclass
class Bundler:
    """A relay's batch on its way up: parts gathered until the next would pass `max_bytes`,
    `MAX_BUNDLE_PARTS` or `MAX_ARRAYS` arrays, or the first has waited `wait_ms`. `wait_ms` 0:
    every message is sent as it comes (what a relay did before bundles), never waiting."""

    max_bytes: int = DEFAULT_BUNDLE_BYTES
    wait_ms: float = DEFAULT_BUNDLE_WAIT_MS
    parts: list[Part] = field(default_factory=list)
    bytes: int = 0
    first_at: float = 0.0
    _groups: set[tuple[Any, ...]] = field(default_factory=set)
    _arrays: int = 0

    def fits(self, part: Part) -> bool:
        """Whether `part` may join the batch without passing a bound (an empty batch takes anything)."""
        if not self.parts:
            return True
        message = part[1]
        signature = _signature(message)
        arrays = self._arrays + (0 if signature in self._groups else len(message.arrays))
        return (len(self.parts) < MAX_BUNDLE_PARTS and arrays <= MAX_ARRAYS
                and self.bytes + part_bytes(message) <= self.max_bytes)

    def add(self, part: Part) -> None:
        if not self.parts:
            self.first_at = time.monotonic()
        signature = _signature(part[1])
        if signature not in self._groups:
            self._groups.add(signature)  # type: ignore[arg-type]
            self._arrays += len(part[1].arrays)
        self.parts.append(part)
        self.bytes += part_bytes(part[1])

    def due_in(self, now: float | None = None) -> float | None:
        """Seconds until the batch must go (0: now), None when it is empty."""
        if not self.parts:
            return None
        now = time.monotonic() if now is None else now
        return max(0.0, self.first_at + self.wait_ms / 1000 - now)

    def take(self) -> list[Part]:
        parts, self.parts, self.bytes, self._arrays = self.parts, [], 0, 0
        self._groups = set()
        return parts
