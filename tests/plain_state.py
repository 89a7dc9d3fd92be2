"""A state through msgpack as the population workflow writes it: arrays as (dtype, shape, bytes),
integers beyond 64 bits (a PCG64 generator's state) as strings, and anything else that is not
plain data fails the test that sends it."""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np


def _pack(tree: Any) -> Any:
    """A state as msgpack takes it: arrays as (dtype, shape, bytes), 128-bit ints as strings;
    anything else that is not plain data fails the test."""
    if isinstance(tree, np.ndarray):
        assert tree.dtype != object, "object arrays are not plain data"
        return {"__array__": [tree.dtype.str, list(tree.shape), np.ascontiguousarray(tree).tobytes()]}
    if isinstance(tree, dict):
        return {str(key): _pack(value) for key, value in tree.items()}
    if isinstance(tree, (list, tuple)):
        return [_pack(value) for value in tree]
    if isinstance(tree, bool) or tree is None or isinstance(tree, (str, float)):
        return tree
    if isinstance(tree, int):
        return tree if -(1 << 63) <= tree < (1 << 64) else {"__int__": str(tree)}
    raise AssertionError(f"not plain data: {type(tree).__name__}")


def _unpack(tree: Any) -> Any:
    if isinstance(tree, dict):
        if set(tree) == {"__array__"}:
            dtype, shape, data = tree["__array__"]
            return np.frombuffer(data, dtype=np.dtype(dtype)).reshape(shape).copy()
        if set(tree) == {"__int__"}:
            return int(tree["__int__"])
        return {key: _unpack(value) for key, value in tree.items()}
    if isinstance(tree, list):
        return [_unpack(value) for value in tree]
    return tree


def through_msgpack(state: dict) -> dict:
    return _unpack(msgpack.unpackb(msgpack.packb(_pack(state)), raw=False))
