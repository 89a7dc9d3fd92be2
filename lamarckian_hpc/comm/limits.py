"""How large a frame each socket accepts from a peer: ZeroMQ's ZMQ_MAXMSGSIZE.

ZeroMQ reads a frame's declared length before anything else, the CURVE handshake included, and
without a limit it allocates whatever a peer declares. A stranger who never presents a key could
then make a listening process grow by gigabytes per connection. With ZMQ_MAXMSGSIZE set (before
bind or connect), ZeroMQ drops any connection that declares a larger frame, before allocating it.

The limit is sized from the largest message a run legitimately sends, its weights (an A3C actor's
gradients are as large) or one rollout, times a safety factor; `runtime.max_message_megabytes`
overrides it. Sockets that only send (weight publishers, experience senders) receive nothing but
subscriptions and handshake commands, so they accept only small frames.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from .wire import MAX_ARRAY_BYTES, MAX_HEADER_BYTES

MEGABYTE = 1 << 20
#: Room above the largest message the run was sized for: estimates of rollouts are upper bounds
#: already, but a dropped legitimate message costs a connection, so the margin is generous.
SAFETY_FACTOR = 4
#: The wire format refuses larger arrays anyway, so no socket needs to accept more.
MAX_MESSAGE_BYTES = MAX_ARRAY_BYTES
#: What a socket accepts when it is made without a run's limit (tools, tests).
DEFAULT_MAX_MESSAGE_BYTES = 64 * MEGABYTE
#: Inbound frames of sockets that only send: subscriptions, CURVE handshake and heartbeat commands.
CONTROL_MESSAGE_BYTES = 64 * 1024
#: Bytes per element of any array on the wire at most (float64, int64).
_ELEMENT_BYTES = 8
#: Per-step scalars of a rollout: log-prob, reward, policy version; per fragment (at most one per
#: step): length, terminated; per episode (at most one per step): return, length.
_SCALARS_PER_STEP = 7


def message_limit(largest_message_bytes: int, override_megabytes: float | None = None) -> int:
    """The ZMQ_MAXMSGSIZE of the run's receiving sockets, in bytes: `override_megabytes` when given,
    else SAFETY_FACTOR times the largest message with a header of the largest size the wire format
    accepts (so no run's limit is below 4 MiB, whatever small estimate it starts from)."""
    if override_megabytes is not None:
        limit = max(CONTROL_MESSAGE_BYTES, round(override_megabytes * MEGABYTE))
    else:
        limit = SAFETY_FACTOR * (largest_message_bytes + MAX_HEADER_BYTES)
    return min(MAX_MESSAGE_BYTES, limit)


def largest_message_bytes(weights: Mapping[str, Any], rollout_steps: int, observation_space: Any,
                          action_space: Any) -> int:
    """An upper bound on the largest message of a run: its weights, or one rollout of `rollout_steps`
    steps (observations with their bootstrap observations, actions and per-step scalars)."""
    weight_bytes = sum(int(np.asarray(array).nbytes) for array in weights.values())
    per_step = 2 * space_elements(observation_space) + space_elements(action_space) + _SCALARS_PER_STEP
    return max(weight_bytes, rollout_steps * per_step * _ELEMENT_BYTES)


def space_elements(space: Any) -> int:
    """Elements of one sample of a gym space (the parts of a Dict or Tuple space summed); read from
    the space's `shape` and `spaces`, so any space library's spaces will do."""
    parts = getattr(space, "spaces", None)
    if isinstance(parts, Mapping):
        return sum(space_elements(part) for part in parts.values())
    if isinstance(parts, (list, tuple)):
        return sum(space_elements(part) for part in parts)
    shape = getattr(space, "shape", None) or ()
    return max(1, math.prod(shape))


def limit_bytes(megabytes: float | None) -> int:
    """The limit a config names, in bytes (the learner resolves `runtime.max_message_megabytes` in
    the config its actors get), or DEFAULT_MAX_MESSAGE_BYTES where none is named."""
    return DEFAULT_MAX_MESSAGE_BYTES if megabytes is None else round(megabytes * MEGABYTE)


#: Descriptors a process keeps for itself beyond its connections (files, pipes, Ray, HDF5).
SPARE_DESCRIPTORS = 256
#: Connections one ZeroMQ I/O thread serves; ZeroMQ's guide gives one thread per GB/s of data,
#: and the CURVE handshakes of thousands of connections at start are what one thread falls behind on.
CONNECTIONS_PER_IO_THREAD = 1000
MAX_IO_THREADS = 8


def raise_open_file_limit(connections: int) -> int:
    """Raise this process's soft open-file limit to what `connections` sockets need (one descriptor
    each, plus SPARE_DESCRIPTORS), up to the hard limit; a learner fed by thousands of actors
    under a cluster's default of 1024 would otherwise fail to accept connections. Says in one line
    when the hard limit is too low. Returns the soft limit now in force."""
    import logging
    import resource

    needed = connections + SPARE_DESCRIPTORS
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
        if target < needed:
            logging.getLogger(__name__).warning(
                "open-file limit: %d connections need %d descriptors, but the hard limit (ulimit -Hn) is %d; "
                "use runtime.broadcast=tree (one connection per relay) or ask for a higher limit",
                connections, needed, hard)
    return soft


def io_threads_for(connections: int) -> int:
    """ZeroMQ I/O threads for a context serving `connections` connections."""
    return max(1, min(MAX_IO_THREADS, math.ceil(connections / CONNECTIONS_PER_IO_THREAD)))
