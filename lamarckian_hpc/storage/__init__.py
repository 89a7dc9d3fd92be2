"""Run files: one HDF5 file per run, written with SWMR so it can be read while it grows."""

from lamarckian_hpc.storage.continuation import continue_run_file
from lamarckian_hpc.storage.disk_space import MEGABYTE, StorageFullError, ensure_free_space, failure_reason
from lamarckian_hpc.storage.private_files import create_private_file, fsync_file, fsync_folder
from lamarckian_hpc.storage.reader import MetricSeries, RunFileReadError, RunReader, RunSummary, open_run
from lamarckian_hpc.storage.run_file import FILE_FORMAT, SCHEMA_VERSION, STANDARD_METRICS, RunWriter, collect_meta

__all__ = [
    "FILE_FORMAT",
    "MEGABYTE",
    "SCHEMA_VERSION",
    "StorageFullError",
    "ensure_free_space",
    "failure_reason",
    "STANDARD_METRICS",
    "MetricSeries",
    "RunFileReadError",
    "RunReader",
    "RunSummary",
    "RunWriter",
    "collect_meta",
    "continue_run_file",
    "create_private_file",
    "fsync_file",
    "fsync_folder",
    "open_run",
]
