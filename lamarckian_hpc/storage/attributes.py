"""HDF5 attributes that hold any JSON value, written by the run file's writer and read back by its reader.

HDF5 stores strings, numbers, booleans and homogeneous lists of them natively; anything else
(dicts, None, mixed lists, ints past 64 bits) is stored as a JSON string and its name listed in
the attribute `json_encoded_attributes`, so that a reader restores exactly what was written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import h5py
import numpy as np

JSON_ENCODED_ATTRIBUTES = "json_encoded_attributes"


def _json_default(value: Any) -> Any:
    """Let json.dumps write numpy scalars and arrays, and paths, found in configs and meta."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot store {type(value).__name__} as JSON: {value!r}")


def to_json(value: Any) -> str:
    return json.dumps(value, default=_json_default)


def _native_attribute(value: Any) -> Any | None:
    """Return `value` in a form HDF5 stores natively, or None when it must be JSON-encoded."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, (bool, float, str)):
        return value
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**63 else None
    if isinstance(value, (list, tuple)) and value:
        if all(isinstance(item, str) for item in value):
            return np.array(value, dtype=h5py.string_dtype())
        for item_type, dtype in ((bool, np.bool_), (int, np.int64), (float, np.float64)):
            if all(type(item) is item_type for item in value):
                try:
                    return np.array(value, dtype=dtype)
                except OverflowError:
                    return None
    return None


def write_attributes(attributes: h5py.AttributeManager, values: Mapping[str, Any]) -> None:
    """Store `values` as attributes, JSON-encoding those HDF5 cannot hold (see module docstring).
    Attributes already there and not in `values` keep their values and encodings."""
    earlier = attributes.get(JSON_ENCODED_ATTRIBUTES)
    json_encoded_names = [str(name) for name in (earlier if earlier is not None else []) if name not in values]
    for name, value in values.items():
        if name == JSON_ENCODED_ATTRIBUTES:
            raise ValueError(f"attribute name {JSON_ENCODED_ATTRIBUTES!r} is reserved")
        native_value = _native_attribute(value)
        if native_value is None:
            attributes[name] = to_json(value)
            json_encoded_names.append(name)
        else:
            attributes[name] = native_value
    attributes[JSON_ENCODED_ATTRIBUTES] = np.array(json_encoded_names, dtype=h5py.string_dtype())


def to_python(value: Any) -> Any:
    """Turn what h5py returns for an attribute (numpy scalars, arrays, bytes) into plain Python."""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray):
        return [to_python(item) for item in value.tolist()]
    if isinstance(value, np.generic):
        return to_python(value.item())
    return value


def read_attributes(attributes: h5py.AttributeManager) -> dict[str, Any]:
    """Inverse of `write_attributes`."""
    values = {name: to_python(attributes[name]) for name in attributes}
    json_encoded_names = values.pop(JSON_ENCODED_ATTRIBUTES, [])
    for name in json_encoded_names:
        values[name] = json.loads(values[name])
    return values
