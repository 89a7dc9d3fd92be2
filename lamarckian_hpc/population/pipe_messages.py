"""Requests and answers between the population driver and its forked workers, over a pipe in the
wire format: plain data (dicts, lists, numbers, strings) in a msgpack header, numpy arrays as raw
frames after it. Nothing is pickled, so nothing but plain data is ever read back."""

from __future__ import annotations

import os
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from ..comm.wire import Message, decode, encode

_BIG_INT = "__int__"  # msgpack carries 64-bit ints; a generator's 128-bit state goes as a string
_ARRAY = "__array__"  # a placeholder in the header for the array frame of this name


def flatten(value: Any, arrays: dict[str, np.ndarray]) -> Any:
    """`value` as msgpack-plain data; numpy arrays move to `arrays` and leave a named placeholder."""
    if isinstance(value, np.ndarray):
        name = str(len(arrays))
        arrays[name] = value
        return {_ARRAY: name}
    if isinstance(value, dict):
        return {str(key): flatten(item, arrays) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [flatten(item, arrays) for item in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        number = int(value)
        return number if -(1 << 63) <= number < (1 << 64) else {_BIG_INT: str(number)}
    if isinstance(value, np.floating):
        return float(value)
    return value


def unflatten(value: Any, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(value, dict):
        if set(value) == {_ARRAY}:
            return np.array(arrays[value[_ARRAY]])  # a writable copy of the received view
        if set(value) == {_BIG_INT}:
            return int(value[_BIG_INT])
        return {key: unflatten(item, arrays) for key, item in value.items()}
    if isinstance(value, list):
        return [unflatten(item, arrays) for item in value]
    return value


def send(connection: Connection, kind: str, payload: Any) -> None:
    arrays: dict[str, np.ndarray] = {}
    meta = {"payload": flatten(payload, arrays)}
    frames = encode(Message(kind, str(os.getpid()), 0, arrays, meta))
    connection.send_bytes(len(frames).to_bytes(4, "little"))
    for frame in frames:
        connection.send_bytes(frame)


def receive(connection: Connection) -> tuple[str, Any]:
    count = int.from_bytes(connection.recv_bytes(), "little")
    message = decode([connection.recv_bytes() for _ in range(count)])
    return message.kind, unflatten(message.meta.get("payload"), message.arrays)
