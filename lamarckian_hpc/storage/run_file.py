"""One HDF5 file per run, written by one process: the record that `analysis/` draws figures from.

The file must be readable while it grows (a reader on a login node watches a running job) and
must stay intact when the writer is killed (SIGKILL by Slurm at the time limit). Both come from
HDF5's single-writer/multiple-reader mode (SWMR), which has rules this module works around:

- SWMR needs the newest file format, so the file is created with ``libver="latest"``.
- No group, dataset or attribute may be created once SWMR writing has started. Everything is
  therefore created in ``RunWriter.__init__``: ``/meta`` attributes, the ``/config`` JSON
  attribute, one group per declared metric, and the ``/status/closed`` flag. Metric names are
  declared up front; appending an undeclared name raises ``ValueError``.
- Because attributes cannot be set at close, a clean close is recorded by writing 1 into the
  1-element int8 dataset ``/status/closed`` (0 while running or after a kill).
- Readers must open with ``swmr=True``: after a SIGKILL the superblock still carries the
  "open for SWMR write" flag and a plain ``h5py.File(path, "r")`` refuses the file (``h5clear -s``
  clears the flag); an SWMR read open accepts it and sees every row flushed before the kill.
- h5py 3 has no ``File.start_swmr_write()``; SWMR writing starts by setting ``swmr_mode = True``.
- HDF5 locks files with ``flock``. Parallel file systems where locking fails (some NFS and Lustre
  mounts) would make every open fail, so files are opened with ``locking="best-effort"``, which
  ignores a locking failure. ``HDF5_USE_FILE_LOCKING=FALSE`` in the environment overrides this.
  SWMR itself needs POSIX write ordering: readers on NFS may see stale data until the file closes.

Layout:
- ``/meta`` attributes: ``collect_meta`` output. Strings, numbers, booleans and homogeneous lists
  of them are stored natively; anything else (dicts, ``None``, mixed lists) is stored as a JSON
  string and its name is listed in the ``/meta`` attribute ``json_encoded_attributes``.
- ``/config`` attribute ``json``: the resolved config as one JSON string.
- ``/metrics/<name>/{wall_time, env_frames, policy_version, value}``: resizable chunked 1-D
  datasets (float64, int64, int64, float64) of equal length once a flush completes.
- ``/status/closed``: int8, shape (1,).

This module must not import anything from ``rl``, ``ec`` or ``runtime``: storage is a leaf.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import socket
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import h5py
import numpy as np

from .disk_space import MEGABYTE, StorageFullError, ensure_free_space
from .population import append_population_rows, create_population_datasets

SCHEMA_VERSION: int = 1

STANDARD_METRICS: tuple[str, ...] = (
    "episode_return_mean",
    "episode_length_mean",
    "env_frames_per_second",
    "trained_frames_per_second",
    "staleness_mean",
    "staleness_max",
    "cpu_utilization",
    "loss_policy",
    "loss_value",
    "entropy",
    "learning_rate",
    "actor_restarts",
)

PACKAGE_DISTRIBUTION_NAME = "lamarckian-hpc"
DEPENDENCY_DISTRIBUTION_NAMES: tuple[str, ...] = (
    "torch",
    "numpy",
    "gymnasium",
    "pettingzoo",
    "h5py",
    "pydantic",
    "ray",
    "pyzmq",
    "msgpack",
    "mpi4py",
    "submitit",
)

META_GROUP = "meta"
CONFIG_GROUP = "config"
CONFIG_JSON_ATTRIBUTE = "json"
METRICS_GROUP = "metrics"
STATUS_CLOSED_DATASET = "status/closed"
JSON_ENCODED_ATTRIBUTES = "json_encoded_attributes"

METRIC_COLUMN_DTYPES: dict[str, np.dtype] = {
    "wall_time": np.dtype(np.float64),
    "env_frames": np.dtype(np.int64),
    "policy_version": np.dtype(np.int64),
    "value": np.dtype(np.float64),
}
METRIC_CHUNK_ROWS = 1024
FILE_LOCKING = "best-effort"


def _installed_version(distribution_name: str) -> str | None:
    try:
        return importlib.metadata.version(distribution_name)
    except importlib.metadata.PackageNotFoundError:
        return None


def collect_meta(extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Describe where and with what this run was made; `extra` entries override the defaults."""
    dependency_versions = {
        name: version
        for name in DEPENDENCY_DISTRIBUTION_NAMES
        if (version := _installed_version(name)) is not None
    }
    hostname = socket.gethostname()
    meta: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "package_version": _installed_version(PACKAGE_DISTRIBUTION_NAME) or "unknown",
        "dependency_versions": dependency_versions,
        "python_version": platform.python_version(),
        "hostname": hostname,
        "hosts": [hostname],
        "start_time": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "pid": os.getpid(),
        "command_line": list(sys.argv),
    }
    meta.update(extra or {})
    return meta


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


def make_private_folder(folder: Path) -> None:
    """Create `folder` (and missing parents) readable by its owner only; an existing folder is
    left as its owner set it."""
    missing = [parent for parent in (folder, *folder.parents) if not parent.exists()]
    folder.mkdir(parents=True, exist_ok=True)
    for created in missing:
        os.chmod(created, 0o700)


def _checked_metric_names(metric_names: Iterable[str]) -> tuple[str, ...]:
    unique_names: dict[str, None] = {}
    for name in metric_names:
        if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
            raise ValueError(f"invalid metric name {name!r}: need a non-empty string without '/'")
        unique_names[name] = None
    return tuple(unique_names)


class RunWriter:
    """Writes one run's file; single writer; SWMR so others read while it grows.

    Rows are buffered in memory by `append` and reach the file at `flush`; after a flush they
    are visible to SWMR readers and survive a SIGKILL of this process. `close` (also called on
    leaving a `with` block) flushes and marks the file as cleanly closed.
    """

    def __init__(
        self,
        path: str | Path,
        config: Mapping[str, Any],
        metric_names: Iterable[str],
        meta: Mapping[str, Any] | None = None,
        *,
        overwrite: bool = False,
        population_shape: tuple[int, int] | None = None,
        min_free_bytes: int = 64 * MEGABYTE,
    ) -> None:
        self.path: Path = Path(path)
        self.min_free_bytes = min_free_bytes
        self._refused = False  # set once a flush was refused for lack of space: nothing more is written
        self.metric_names: tuple[str, ...] = _checked_metric_names(metric_names)
        self._created_monotonic_seconds = time.monotonic()
        self._last_flush_monotonic_seconds = self._created_monotonic_seconds
        self._pending_rows: dict[str, list[tuple[float, int, int, float]]] = {
            name: [] for name in self.metric_names
        }
        config_json = to_json(dict(config))
        make_private_folder(self.path.parent)
        ensure_free_space(self.path, min_free_bytes, "run file")
        self._file: h5py.File | None = h5py.File(
            self.path, "w" if overwrite else "x", libver="latest", locking=FILE_LOCKING
        )
        try:
            write_attributes(self._file.require_group(META_GROUP).attrs, collect_meta(meta))
            self._file.require_group(CONFIG_GROUP).attrs[CONFIG_JSON_ATTRIBUTE] = config_json
            metrics_group = self._file.require_group(METRICS_GROUP)
            self._columns: dict[str, dict[str, h5py.Dataset]] = {}
            for name in self.metric_names:
                metric_group = metrics_group.create_group(name)
                self._columns[name] = {
                    column: metric_group.create_dataset(
                        column, shape=(0,), maxshape=(None,), chunks=(METRIC_CHUNK_ROWS,), dtype=dtype
                    )
                    for column, dtype in METRIC_COLUMN_DTYPES.items()
                }
            self._population = (create_population_datasets(self._file, *population_shape)
                                if population_shape is not None else None)
            os.chmod(self.path, 0o600)  # a run's record is its owner's: other users of the cluster cannot read it
            self._closed_flag = self._file.create_dataset(
                STATUS_CLOSED_DATASET, data=np.zeros(1, dtype=np.int8)
            )
            self._file.swmr_mode = True
            self._file.flush()
        except BaseException:
            self._file.close()
            self._file = None
            self.path.unlink(missing_ok=True)
            raise

    @property
    def is_open(self) -> bool:
        return self._file is not None

    def _require_open(self) -> h5py.File:
        if self._file is None:
            raise RuntimeError(f"run file {self.path} is already closed")
        return self._file

    def _check_declared(self, name: str) -> None:
        if name not in self._pending_rows:
            raise ValueError(
                f"metric {name!r} was not declared when {self.path} was created; "
                f"declared metrics: {list(self.metric_names)}"
            )

    def append(
        self,
        name: str,
        value: float,
        *,
        env_frames: int,
        policy_version: int,
        wall_time: float | None = None,
    ) -> None:
        """Buffer one row; `wall_time` defaults to seconds since this writer was created."""
        self.append_many({name: value}, env_frames=env_frames, policy_version=policy_version, wall_time=wall_time)

    def append_many(
        self,
        values: Mapping[str, float],
        *,
        env_frames: int,
        policy_version: int,
        wall_time: float | None = None,
    ) -> None:
        """Buffer one row per metric, all sharing frames, version and time. All-or-nothing."""
        self._require_open()
        for name in values:
            self._check_declared(name)
        if wall_time is None:
            wall_time = time.monotonic() - self._created_monotonic_seconds
        for name, value in values.items():
            self._pending_rows[name].append((float(wall_time), int(env_frames), int(policy_version), float(value)))

    def append_series(self, name: str, wall_time: np.ndarray, env_frames: np.ndarray, policy_version: np.ndarray,
                      value: np.ndarray) -> None:
        """Buffer many rows of one metric at once (copying a run's history, say)."""
        self._require_open()
        self._check_declared(name)
        self._pending_rows[name].extend(zip(np.asarray(wall_time, float).tolist(), np.asarray(env_frames, int).tolist(),
                                            np.asarray(policy_version, int).tolist(), np.asarray(value, float).tolist()))

    def update_meta(self, values: Mapping[str, Any]) -> None:
        """Add or replace /meta attributes while the run is written: what is known only once it runs,
        such as how many actors connected from each host."""
        write_attributes(self._require_open()[META_GROUP].attrs, values)

    def flush(self) -> None:
        """Write all buffered rows (one resize per dataset) and flush the file to disk.

        Raises StorageFullError, writing nothing, when the disk is nearly full; the file keeps every
        row of earlier flushes."""
        run_file = self._require_open()
        try:
            ensure_free_space(self.path, self.min_free_bytes, "run file")
        except StorageFullError:
            self._refused = True
            raise
        for name, rows in self._pending_rows.items():
            if not rows:
                continue
            columns_by_name = dict(zip(METRIC_COLUMN_DTYPES, zip(*rows)))
            for column, dataset in self._columns[name].items():
                old_length = dataset.shape[0]
                dataset.resize((old_length + len(rows),))
                dataset[old_length:] = np.asarray(columns_by_name[column], dtype=dataset.dtype)
            rows.clear()
        run_file.flush()
        self._last_flush_monotonic_seconds = time.monotonic()

    def append_population(self, rows: dict[str, np.ndarray]) -> None:
        """Write one generation's rows (columns of storage.population) and flush them."""
        if self._population is None:
            raise ValueError(f"{self.path} was created without population_shape; it keeps no population history")
        self._require_open()
        append_population_rows(self._population, rows)
        self.flush()

    def flush_if_due(self, interval_seconds: float) -> bool:
        """Flush when at least `interval_seconds` passed since the last flush; say whether it did."""
        if time.monotonic() - self._last_flush_monotonic_seconds < interval_seconds:
            return False
        self.flush()
        return True

    def close(self, completed: bool = True) -> None:
        """Flush and close the file; /status/closed becomes 1 only when the run `completed`.

        A run that ends in an error closes with completed=False, so that readers do not take a
        crashed run for a finished one. Calling it again does nothing.
        """
        if self._file is None:
            return
        if self._refused:  # the rows since the last flush are lost; what is on disk stays readable
            self._file.close()
            self._file = None
            return
        try:
            self.flush()
            if completed:
                self._closed_flag[0] = 1
            self._file.flush()
        finally:
            self._file.close()
            self._file = None

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
