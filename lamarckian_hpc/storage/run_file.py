"""One HDF5 file per run, written by one process: the record that `analysis/` draws figures from.

The file must be readable while it grows (a reader on a login node watches a running job) and
must stay intact when the writer is killed (SIGKILL by Slurm at the time limit). Both come from
HDF5's single-writer/multiple-reader mode (SWMR), which has rules this module works around:

- SWMR needs the HDF5 1.10 file format (superblock version 3), so the file is created with
  ``libver=FILE_FORMAT``, ``("v110", "v110")``: the oldest format SWMR allows, and never newer.
  ``libver="latest"`` would take the format of whichever HDF5 h5py bundles (2.0 with h5py 3.16),
  whose layout and datatype messages HDF5 1.10-1.14 cannot read (gzip-compressed and boolean
  datasets among them); the 1.10 format opens in every HDF5 from 1.10.0 on, in clusters' modules,
  MATLAB, Julia and ``h5dump`` alike. Everything else the package writes with h5py uses it too.
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
- ``/trajectories/<policy>/...``: recorded episodes, when the run records them (``trajectories``):
  a `train` run's, and a PBT, EMOGI or league run's, whose episode index also tags each episode with its
  member, generation and opponent (``storage.trajectories`` describes the columns).

A run file is created under a temporary name (``<name>.creating``), private to its owner from the
moment it exists (no window in which another user of the cluster could open it), laid out, put in
SWMR mode, flushed and synced; only then does it get its name. A writer killed before that leaves
no file under the run's name (a half-created HDF5 file can be opened neither with nor without
SWMR), and the next run of that name starts normally.

This module must not import anything from ``rl``, ``ec`` or ``runtime``: storage is a leaf.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import importlib.metadata
import os
import platform
import socket
import sys
import time
import traceback
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import h5py
import numpy as np

from .attributes import to_json, write_attributes
from .disk_space import MEGABYTE, StorageFullError, ensure_free_space, failure_reason, is_write_failure
from .population import append_population_rows, create_population_datasets
from .private_files import create_private_file, fsync_file, fsync_folder, make_private_folder
from .trajectories import EpisodeRecord, TrajectorySpec, TrajectoryTables

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

METRIC_COLUMN_DTYPES: dict[str, np.dtype] = {
    "wall_time": np.dtype(np.float64),
    "env_frames": np.dtype(np.int64),
    "policy_version": np.dtype(np.int64),
    "value": np.dtype(np.float64),
}
METRIC_CHUNK_ROWS = 1024
FILE_LOCKING = "best-effort"
#: HDF5 library version bounds of every file the package writes (h5py's ``libver``): the 1.10 file
#: format, the oldest that SWMR allows, so that HDF5 1.10 and later read the files.
FILE_FORMAT: tuple[str, str] = ("v110", "v110")
#: Suffix of a run file while it is created; it gets its name once it is valid and in SWMR mode.
CREATING_SUFFIX = ".creating"


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
        "start_time": datetime.datetime.now(datetime.UTC).isoformat(),
        "pid": os.getpid(),
        "command_line": list(sys.argv),
    }
    meta.update(extra or {})
    return meta


def _run_file_exists(path: Path) -> FileExistsError:
    return FileExistsError(errno.EEXIST, "a run file of this name exists (pass overwrite=True to replace it)",
                           str(path))


def _publish(creating: Path, path: Path, overwrite: bool) -> None:
    """Give the complete file at `creating` the name `path`; without `overwrite`, atomically refuse
    when `path` exists (a hard link cannot replace a name, a rename would)."""
    if overwrite:
        os.replace(creating, path)
        return
    try:
        os.link(creating, path)
    except FileExistsError:
        raise _run_file_exists(path) from None
    except OSError as error:  # a file system without hard links: check, then rename
        if error.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
            raise
        if os.path.lexists(path):
            raise _run_file_exists(path) from None
        os.replace(creating, path)
        return
    creating.unlink()


def _holds_h5py_objects(value: Any) -> bool:
    """Whether `value` is, or holds, a handle on a group or dataset (not a file) of an HDF5 file."""
    if isinstance(value, h5py.File):
        return False
    if isinstance(value, h5py.HLObject):
        return True
    if isinstance(value, dict):
        return any(_holds_h5py_objects(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_h5py_objects(item) for item in value)
    return False


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
        trajectories: Iterable[TrajectorySpec] = (),
        trajectory_compression: str = "gzip",
        max_trajectory_bytes: int | None = None,
    ) -> None:
        self.path: Path = Path(path)
        self._trajectory_options = (list(trajectories), trajectory_compression, max_trajectory_bytes)
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
        if not overwrite and os.path.lexists(self.path):
            raise _run_file_exists(self.path)
        creating = self.path.with_name(self.path.name + CREATING_SUFFIX)
        os.close(create_private_file(creating))  # HDF5 truncates it and keeps its mode
        try:
            file = h5py.File(creating, "w", libver=FILE_FORMAT, locking=FILE_LOCKING)
        except BaseException:
            creating.unlink(missing_ok=True)
            raise
        published = False
        try:
            self._file: h5py.File | None = file
            self._lay_out(file, config_json, meta, population_shape)
            # Written out before SWMR starts: a full device then fails this plain flush, after which
            # the file can still be let go (`_abandon`); HDF5 leaves a start of SWMR writing that
            # fails half-way in a state that crashes the process whatever is done next.
            file.flush()
            file.swmr_mode = True
            file.flush()
            fsync_file(creating)
            _publish(creating, self.path, overwrite)  # the open handle follows the file to its name
            published = True
            fsync_folder(self.path.parent)
        except BaseException as error:
            self._abandon(file, error)
            creating.unlink(missing_ok=True)
            if published:  # the run never started: its file goes with it
                self.path.unlink(missing_ok=True)
            if is_write_failure(error) and not isinstance(error, FileExistsError):
                raise StorageFullError(f"run file {self.path} not created: {failure_reason(error)}; "
                                       "nothing was left behind") from None
            raise

    def _lay_out(self, file: h5py.File, config_json: str, meta: Mapping[str, Any] | None,
                 population_shape: tuple[int, int] | None) -> None:
        """Everything the file will hold, created now: SWMR forbids creating anything later."""
        write_attributes(file.require_group(META_GROUP).attrs, collect_meta(meta))
        file.require_group(CONFIG_GROUP).attrs[CONFIG_JSON_ATTRIBUTE] = config_json
        metrics_group = file.require_group(METRICS_GROUP)
        self._columns: dict[str, dict[str, h5py.Dataset]] = {}
        for name in self.metric_names:
            metric_group = metrics_group.create_group(name)
            self._columns[name] = {
                column: metric_group.create_dataset(
                    column, shape=(0,), maxshape=(None,), chunks=(METRIC_CHUNK_ROWS,), dtype=dtype
                )
                for column, dtype in METRIC_COLUMN_DTYPES.items()
            }
        self._population = (create_population_datasets(file, *population_shape)
                            if population_shape is not None else None)
        specs, compression, max_bytes = self._trajectory_options
        self._trajectories = TrajectoryTables(file, specs, compression, max_bytes) if specs else None
        self._closed_flag = file.create_dataset(STATUS_CLOSED_DATASET, data=np.zeros(1, dtype=np.int8))

    def _abandon(self, file: h5py.File, error: BaseException) -> None:
        """Close a file whose creation failed (the caller unlinks it). After a failed write (a full
        device) HDF5 retries the write when it closes the file and, failing again, crashes the
        process closing its datasets; so the file's descriptor is pointed at /dev/null first, where
        every write succeeds, and the handles on its datasets are released before the file."""
        if is_write_failure(error):
            with contextlib.suppress(Exception):
                descriptor = file.id.get_vfd_handle()
                sink = os.open(os.devnull, os.O_WRONLY)
                os.dup2(sink, descriptor)
                os.close(sink)
        for name, value in list(vars(self).items()):
            if _holds_h5py_objects(value):
                self.__dict__[name] = None
        cause: BaseException | None = error
        seen: set[int] = set()
        while cause is not None and id(cause) not in seen:  # the failed calls' frames hold handles too
            seen.add(id(cause))
            traceback.clear_frames(cause.__traceback__)
            cause = cause.__cause__ or cause.__context__
        with contextlib.suppress(Exception):
            file.close()
        self._file = None

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
        if self._trajectories is not None:
            self._trajectories.flush()
        run_file.flush()
        self._last_flush_monotonic_seconds = time.monotonic()

    def append_population(self, rows: dict[str, np.ndarray]) -> None:
        """Write one generation's rows (columns of storage.population) and flush them."""
        if self._population is None:
            raise ValueError(f"{self.path} was created without population_shape; it keeps no population history")
        self._require_open()
        append_population_rows(self._population, rows)
        self.flush()

    def append_episode(self, record: EpisodeRecord) -> bool:
        """Buffer one recorded episode for the next flush; False once the trajectory cap was reached
        (see `storage.trajectories`) or when the file records no trajectories."""
        self._require_open()
        return self._trajectories is not None and self._trajectories.add(record)

    @property
    def trajectories_stopped(self) -> bool:
        """Whether recording stopped at `max_trajectory_bytes`."""
        return self._trajectories is not None and self._trajectories.stopped

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
