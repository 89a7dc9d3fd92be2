"""Run files: one HDF5 file per run, written with SWMR so it can be read while it grows."""

from lamarckian_hpc.storage.continuation import continue_run_file
from lamarckian_hpc.storage.disk_space import MEGABYTE, StorageFullError, ensure_free_space
from lamarckian_hpc.storage.reader import MetricSeries, RunReader, RunSummary, open_run
from lamarckian_hpc.storage.run_file import SCHEMA_VERSION, STANDARD_METRICS, RunWriter, collect_meta

__all__ = [
    "MEGABYTE",
    "SCHEMA_VERSION",
    "StorageFullError",
    "ensure_free_space",
    "STANDARD_METRICS",
    "MetricSeries",
    "RunReader",
    "RunSummary",
    "RunWriter",
    "collect_meta",
    "continue_run_file",
    "open_run",
]
