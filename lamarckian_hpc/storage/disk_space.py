"""Stop writing before the disk is full, while the files already written are still whole.

HDF5 cannot survive a write that fails half-way: a flush that hits ENOSPC leaves the file's
metadata half-updated, and rows flushed long before become unreadable. So writers check the free
space of the target file system before each flush and refuse to write once it drops below a
reserve; the run then ends with a clear error, and everything written until then stays readable.
"""

from __future__ import annotations

import shutil
from pathlib import Path

MEGABYTE = 1024 * 1024


class StorageFullError(OSError):
    """The file system of a run's files is (nearly) full; the message says where and how full."""


def ensure_free_space(path: str | Path, reserve_bytes: int, what: str) -> None:
    """Raise StorageFullError when the file system holding `path` has less than `reserve_bytes` free."""
    if reserve_bytes <= 0:
        return
    folder = Path(path)
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    free = shutil.disk_usage(folder).free
    if free < reserve_bytes:
        raise StorageFullError(
            f"not writing {what} {path}: only {free / MEGABYTE:.1f} MB free on its file system, below the "
            f"reserve of {reserve_bytes / MEGABYTE:.0f} MB (storage.min_free_megabytes); everything written "
            "before is intact")
