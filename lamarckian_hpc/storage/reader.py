"""Reads run files written by `run_file.RunWriter`, for `analysis/`, benchmarks and live monitoring.

A file can be read while its writer is still appending, after the writer was killed, or after a
clean close: it is always opened in SWMR read mode (see `run_file` for why a plain read-only open
fails on a killed run). Datasets are refreshed before each read, so one open `RunReader` sees
rows as they are flushed. A reader may catch a flush half-way, when some of a metric's four
datasets have grown and others not yet; `metric` then returns the rows present in all four.

This module only reads; it must never open a file for writing.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import h5py
import numpy as np

from lamarckian_hpc.storage.population import read_genome_names, read_population
from lamarckian_hpc.storage.run_file import (
    CONFIG_GROUP,
    CONFIG_JSON_ATTRIBUTE,
    FILE_LOCKING,
    JSON_ENCODED_ATTRIBUTES,
    META_GROUP,
    METRIC_COLUMN_DTYPES,
    METRICS_GROUP,
    STATUS_CLOSED_DATASET,
)


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


def _to_python(value: Any) -> Any:
    """Turn what h5py returns for an attribute (numpy scalars, arrays, bytes) into plain Python."""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray):
        return [_to_python(item) for item in value.tolist()]
    if isinstance(value, np.generic):
        return _to_python(value.item())
    return value


def read_attributes(attributes: h5py.AttributeManager) -> dict[str, Any]:
    """Inverse of `run_file.write_attributes`."""
    values = {name: _to_python(attributes[name]) for name in attributes}
    json_encoded_names = values.pop(JSON_ENCODED_ATTRIBUTES, [])
    for name in json_encoded_names:
        values[name] = json.loads(values[name])
    return values


class RunReader:
    """Read-only view of one run file; use `open_run` to make one, and close it when done."""

    def __init__(self, path: str | Path) -> None:
        self.path: Path = Path(path)
        self._file: h5py.File = h5py.File(self.path, "r", libver="latest", swmr=True, locking=FILE_LOCKING)
        try:
            self.meta: dict[str, Any] = read_attributes(self._file[META_GROUP].attrs)
            config_json = _to_python(self._file[CONFIG_GROUP].attrs[CONFIG_JSON_ATTRIBUTE])
            self.config: dict[str, Any] = json.loads(config_json)
            self._closed_flag: h5py.Dataset = self._file[STATUS_CLOSED_DATASET]
            metrics_group = self._file[METRICS_GROUP]
            self._columns: dict[str, dict[str, h5py.Dataset]] = {
                name: {column: metrics_group[name][column] for column in METRIC_COLUMN_DTYPES}
                for name in metrics_group
            }
        except BaseException:
            self._file.close()
            raise

    @property
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
        datasets = self._columns[name]
        for dataset in datasets.values():
            dataset.refresh()
        complete_rows = min(dataset.shape[0] for dataset in datasets.values())
        return MetricSeries(name=name, **{column: dataset[:complete_rows] for column, dataset in datasets.items()})

    def population(self) -> dict[str, np.ndarray]:
        """Every individual evaluated so far, one row each (generation, id, parent_ids, genome,
        objectives, wall_time, worker, env_frames); empty for runs without a population."""
        return read_population(self._file)

    def genome_names(self) -> list[str]:
        """Names of the population's genome entries (a PBT run's hyperparameters); [] if unnamed."""
        return read_genome_names(self._file)

    def genome_columns(self) -> dict[str, np.ndarray]:
        """The population's genomes as one named column each (empty when the genome is unnamed)."""
        genomes = self.population().get("genome")
        return {} if genomes is None else {name: genomes[:, k] for k, name in enumerate(self.genome_names())}

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
