"""Reads run files written by `run_file.RunWriter`, for `analysis/`, benchmarks and live monitoring.

A file can be read while its writer is still appending, after the writer was killed, or after a
clean close: it is always opened in SWMR read mode (see `run_file` for why a plain read-only open
fails on a killed run). Datasets are refreshed before each read, so one open `RunReader` sees
rows as they are flushed. A reader may catch a flush half-way, when some of a metric's four
datasets have grown and others not yet; `metric` then returns the rows present in all four.

A file that is not a run file, or one truncated or damaged (a disk error, a copy cut short), ends
in one `RunFileReadError` naming the file and what is wrong, whichever read meets the damage
first, never in a crash of the caller or a read of more memory than the file could hold.

This module only reads; it must never open a file for writing.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import h5py
import numpy as np

from lamarckian_hpc.storage.attributes import read_attributes, to_python
from lamarckian_hpc.storage.population import read_genome_names, read_population
from lamarckian_hpc.storage.run_file import (
    CONFIG_GROUP,
    CONFIG_JSON_ATTRIBUTE,
    FILE_LOCKING,
    META_GROUP,
    METRIC_COLUMN_DTYPES,
    METRICS_GROUP,
    STATUS_CLOSED_DATASET,
)
from lamarckian_hpc.storage.trajectories import (
    LARGEST_COMPRESSION_RATIO,
    read_episode_index,
    read_episode_steps,
    trajectory_policies,
)

ResultT = TypeVar("ResultT")

#: Reads of one piece of metadata before a checksum failure counts as damage. HDF5 reads again in
#: SWMR mode because a reader may catch the writer mid-flush; its default, 100 tries backing off
#: towards an hour in all, makes a damaged file hang its reader for that hour. The pause doubles
#: from a nanosecond, so 30 tries wait about a second in all, far longer than a flush takes.
METADATA_READ_ATTEMPTS = 30
#: The h5py driver (HDF5's sec2, the default) that reads with METADATA_READ_ATTEMPTS.
BOUNDED_RETRY_DRIVER = "lamarckian-hpc-bounded-retries"


def _read_attempts_setter() -> Callable[[int, int], int] | None:
    """HDF5's H5Pset_metadata_read_attempts, which h5py does not wrap; None where it cannot be found
    (the HDF5 default then applies)."""
    try:
        setter = ctypes.CDLL(h5py.h5p.__file__).H5Pset_metadata_read_attempts  # found among h5py's libraries
    except (OSError, AttributeError):
        return None
    setter.argtypes, setter.restype = [ctypes.c_int64, ctypes.c_uint], ctypes.c_int
    return setter


_SET_READ_ATTEMPTS = _read_attempts_setter()


def _bounded_retries(plist: h5py.h5p.PropFAID) -> None:
    plist.set_fapl_sec2()
    if _SET_READ_ATTEMPTS is not None:
        _SET_READ_ATTEMPTS(plist.id, METADATA_READ_ATTEMPTS)


if BOUNDED_RETRY_DRIVER not in h5py.registered_drivers():
    h5py.register_driver(BOUNDED_RETRY_DRIVER, _bounded_retries)


class RunFileReadError(OSError):
    """A run file that cannot be read: not HDF5, truncated, damaged, or not laid out by RunWriter.
    The message is one line: the file and what is wrong with it."""


def _reason(error: BaseException) -> str:
    """What went wrong, on one short line (h5py's messages carry HDF5's own details)."""
    if isinstance(error, KeyError) and error.args:
        text = str(error.args[0])
    else:
        text = str(error) or type(error).__name__
    if isinstance(error, (MemoryError, RecursionError)):
        text = f"{type(error).__name__}: {text}"
    text = " ".join(text.split())
    return text if len(text) <= 300 else text[:297] + "..."


def _readable(method: Callable[..., ResultT]) -> Callable[..., ResultT]:
    """Any failure of a read of the file becomes one RunFileReadError naming it."""

    @functools.wraps(method)
    def read(self: RunReader, *args: Any, **kwargs: Any) -> ResultT:
        try:
            return method(self, *args, **kwargs)
        except RunFileReadError:
            raise
        except Exception as error:  # h5py raises OSError, KeyError, ValueError, TypeError, ... on damage
            raise RunFileReadError(f"{self.path}: damaged run file: {_reason(error)}") from None

    return read


@dataclass(frozen=True)
class MetricSeries:
    """The rows of one metric, as parallel arrays of equal length."""

    name: str
    wall_time: np.ndarray  # [rows] float64, seconds since the writer was created
    env_frames: np.ndarray  # [rows] int64
    policy_version: np.ndarray  # [rows] int64
    value: np.ndarray  # [rows] float64

    def __len__(self) -> int:
        return int(self.value.shape[0])

    def last(self) -> float | None:
        """The most recent value, or None when no row was written."""
        return float(self.value[-1]) if len(self) else None


@dataclass(frozen=True)
class RunSummary:
    """What a run reached, small enough to print or put in a table of runs."""

    path: str
    meta: dict[str, Any]
    config: dict[str, Any]
    closed_cleanly: bool
    last_values: dict[str, float | None]
    counts: dict[str, int]  # rows per metric
    env_frames: int  # largest env_frames of any row, 0 when there are none
    wall_time_seconds: float  # largest wall_time of any row, 0.0 when there are none

    def to_json_dict(self) -> dict[str, Any]:
        """Plain Python values only; NaN and infinite last values become None (strict JSON)."""
        return {
            "path": self.path,
            "meta": self.meta,
            "config": self.config,
            "closed_cleanly": bool(self.closed_cleanly),
            "last_values": {
                name: (float(value) if value is not None and math.isfinite(value) else None)
                for name, value in self.last_values.items()
            },
            "counts": {name: int(count) for name, count in self.counts.items()},
            "env_frames": int(self.env_frames),
            "wall_time_seconds": float(self.wall_time_seconds),
        }


class RunReader:
    """Read-only view of one run file; use `open_run` to make one, and close it when done."""

    def __init__(self, path: str | Path) -> None:
        self.path: Path = Path(path)
        if not self.path.exists():
            raise FileNotFoundError(errno.ENOENT, "no such run file", str(self.path))
        try:
            self._file: h5py.File = h5py.File(self.path, "r", driver=BOUNDED_RETRY_DRIVER, libver="latest",
                                              swmr=True, locking=FILE_LOCKING)
        except Exception as error:
            raise RunFileReadError(f"{self.path}: not a readable HDF5 file: {_reason(error)}") from None
        try:
            for group in (META_GROUP, CONFIG_GROUP, METRICS_GROUP, STATUS_CLOSED_DATASET):
                if group not in self._file:
                    raise RunFileReadError(f"{self.path}: not a run file: it has no /{group}")
            self.meta: dict[str, Any] = read_attributes(self._file[META_GROUP].attrs)
            config_json = to_python(self._file[CONFIG_GROUP].attrs[CONFIG_JSON_ATTRIBUTE])
            self.config: dict[str, Any] = json.loads(config_json)
            if not isinstance(self.config, dict):
                raise RunFileReadError(f"{self.path}: damaged run file: its config is not a mapping")
            self._closed_flag: h5py.Dataset = self._file[STATUS_CLOSED_DATASET]
            metrics_group = self._file[METRICS_GROUP]
            self._columns: dict[str, dict[str, h5py.Dataset]] = {
                name: {column: metrics_group[name][column] for column in METRIC_COLUMN_DTYPES}
                for name in metrics_group
            }
        except BaseException as error:
            self._file.close()
            if isinstance(error, Exception) and not isinstance(error, RunFileReadError):
                raise RunFileReadError(f"{self.path}: damaged run file: {_reason(error)}") from None
            raise

    def _file_bytes(self) -> int:
        """The file's size now (it grows while its writer runs)."""
        try:
            return os.fstat(self._file.id.get_vfd_handle()).st_size
        except (OSError, ValueError, TypeError):
            return int(self._file.id.get_filesize())

    def _bounded(self, dataset: h5py.Dataset, rows: int | None = None) -> None:
        """Refuse to read a dataset whose shape claims more data than the file holds: a damaged
        shape must not make a read allocate without bound. RunWriter stores every row, uncompressed."""
        inner = math.prod(dataset.shape[1:]) if dataset.ndim > 1 else 1
        claimed = (dataset.shape[0] if rows is None else rows) * inner * max(dataset.dtype.itemsize, 1)
        if claimed > self._file_bytes():
            raise RunFileReadError(f"{self.path}: damaged run file: {dataset.name} claims {claimed:,} bytes, "
                                   f"more than the file's {self._file_bytes():,}")

    @property
    @_readable
    def closed_cleanly(self) -> bool:
        """True once the writer closed the file; False while it runs and after it was killed."""
        self._closed_flag.refresh()
        return bool(self._closed_flag[0])

    def metric_names(self) -> list[str]:
        return list(self._columns)

    def metric(self, name: str) -> MetricSeries:
        """All rows flushed so far for `name`."""
        if name not in self._columns:
            raise KeyError(f"no metric {name!r} in {self.path}; it has {self.metric_names()}")
        return self._read_metric(name)

    @_readable
    def _read_metric(self, name: str) -> MetricSeries:
        datasets = self._columns[name]
        for dataset in datasets.values():
            dataset.refresh()
        complete_rows = min(dataset.shape[0] for dataset in datasets.values())
        for dataset in datasets.values():
            self._bounded(dataset, complete_rows)
        return MetricSeries(name=name, **{column: dataset[:complete_rows] for column, dataset in datasets.items()})

    @_readable
    def population(self) -> dict[str, np.ndarray]:
        """Every individual evaluated so far, one row each (generation, id, parent_ids, genome,
        objectives, wall_time, worker, env_frames); empty for runs without a population."""
        return read_population(self._file, check=self._bounded)

    @_readable
    def genome_names(self) -> list[str]:
        """Names of the population's genome entries (a PBT run's hyperparameters); [] if unnamed."""
        return read_genome_names(self._file)

    def genome_columns(self) -> dict[str, np.ndarray]:
        """The population's genomes as one named column each (empty when the genome is unnamed)."""
        genomes = self.population().get("genome")
        return {} if genomes is None else {name: genomes[:, k] for k, name in enumerate(self.genome_names())}

    @_readable
    def trajectory_policies(self) -> list[str]:
        """Policies whose episodes the run records ([] when it records none)."""
        return trajectory_policies(self._file)

    def _policy(self, policy_id: str | None) -> str:
        """`policy_id`, or the only recorded policy when None; KeyError naming what is recorded."""
        policies = self.trajectory_policies()
        if policy_id is None:
            if len(policies) == 1:
                return policies[0]
            raise KeyError(f"{self.path} records no trajectories" if not policies
                           else f"{self.path} records trajectories of policies {policies}: name one")
        if policy_id not in policies:
            raise KeyError(f"{self.path} records no trajectories of policy {policy_id!r} "
                           f"(it records {policies or 'none'})")
        return policy_id

    def episodes(self, policy_id: str | None = None) -> dict[str, np.ndarray]:
        """The index of the recorded episodes of `policy_id` (the only policy when None): one row
        per episode whose steps are all in the file (columns: see storage.trajectories)."""
        return self._read_index(self._policy(policy_id))

    @_readable
    def _read_index(self, policy_id: str) -> dict[str, np.ndarray]:
        return read_episode_index(self._file, policy_id, check=self._bounded)

    def episode(self, episode: int, policy_id: str | None = None,
                index: dict[str, np.ndarray] | None = None, member: int | None = None) -> dict[str, np.ndarray]:
        """Every step of recorded episode number `episode` (the run's episode count; in a population
        run, `member`'s count: name the member when several recorded that number), as arrays:
        observations, actions, rewards, terminated, truncated, policy_version, episode, step, agent_id.
        A caller reading many episodes passes the index it read once (`episodes()`)."""
        policy_id = self._policy(policy_id)
        index = self._read_index(policy_id) if index is None else index
        chosen = index["episode"] == episode
        whose = f"episode {episode} of policy {policy_id!r}"
        if member is not None:
            chosen &= index["member"] == member
            whose = f"episode {episode} of member {member} of policy {policy_id!r}"
        where = np.flatnonzero(chosen)
        if not len(where):
            shown = ", ".join(str(number) for number in index["episode"][:10])
            raise KeyError(f"{whose} is not recorded in {self.path} "
                           f"({len(index['episode'])} are{': ' + shown if shown else ''}"
                           f"{', ...' if len(index['episode']) > 10 else ''})")
        members = sorted({int(index["member"][row]) for row in where})
        if len(members) > 1:
            raise KeyError(f"{whose} is recorded for members {members} in {self.path}: name one")
        return self.episode_at(int(where[0]), policy_id, index)

    def episode_at(self, row: int, policy_id: str | None = None,
                   index: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Every step of the episode in row `row` of the index (as `episode` returns them)."""
        policy_id = self._policy(policy_id)
        index = self._read_index(policy_id) if index is None else index
        return self._read_steps(policy_id, int(index["first_row"][row]), int(index["length"][row]))

    def step_columns(self, names: tuple[str, ...], policy_id: str | None = None,
                     index: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Step columns `names` of the episodes of `index` (by default every whole recorded episode),
        in its order: what an analysis over all episodes needs (actions and versions, say) without
        their observations. Pass the index read before, so that both describe the same episodes of
        a file that grows."""
        policy_id = self._policy(policy_id)
        index = self._read_index(policy_id) if index is None else index
        firsts, lengths = index["first_row"], index["length"]
        if not len(firsts):
            return {name: np.zeros(0) for name in names}
        low, high = int(firsts.min()), int((firsts + lengths).max())
        span = self._read_steps(policy_id, low, high - low, names)  # one read; all of it for a whole index
        rows = np.concatenate([np.arange(first, first + length) for first, length in zip(firsts, lengths)]) - low
        return {name: span[name][rows] for name in names}

    @_readable
    def _read_steps(self, policy_id: str, first_row: int, length: int,
                    names: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
        def check(claimed: int) -> None:
            if claimed > LARGEST_COMPRESSION_RATIO * self._file_bytes():
                raise RunFileReadError(f"{self.path}: damaged run file: an episode of {policy_id!r} claims "
                                       f"{claimed:,} bytes, more than the file's {self._file_bytes():,} could hold")

        return read_episode_steps(self._file, policy_id, first_row, length, check=check, names=names)

    def metrics(self) -> dict[str, MetricSeries]:
        return {name: self.metric(name) for name in self._columns}

    def summary(self) -> RunSummary:
        series_by_name = self.metrics()
        nonempty_series = [series for series in series_by_name.values() if len(series)]
        return RunSummary(
            path=str(self.path),
            meta=self.meta,
            config=self.config,
            closed_cleanly=self.closed_cleanly,
            last_values={name: series.last() for name, series in series_by_name.items()},
            counts={name: len(series) for name, series in series_by_name.items()},
            env_frames=max((int(series.env_frames.max()) for series in nonempty_series), default=0),
            wall_time_seconds=max((float(series.wall_time.max()) for series in nonempty_series), default=0.0),
        )

    def close(self) -> None:
        """Close the file; calling it again does nothing."""
        if self._file.id.valid:
            self._file.close()

    def __enter__(self) -> RunReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def open_run(path: str | Path) -> RunReader:
    """Open a run file for reading, whether it is growing, was killed, or was closed cleanly."""
    return RunReader(path)
