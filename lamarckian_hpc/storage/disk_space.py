"""Stop writing before the disk is full, while the files already written are still whole.

HDF5 cannot survive a write that fails half-way: a flush that hits ENOSPC leaves the file's
metadata half-updated, and rows flushed long before become unreadable. So writers check the free
space of the target file system before each flush and refuse to write once it drops below a
reserve; the run then ends with a clear error, and everything written until then stays readable.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

MEGABYTE = 1024 * 1024


class StorageFullError(OSError):
    """The file system of a run's files is (nearly) full, or refused a write of one of them; the
    message says where and why, and that what was written before is intact."""


def is_write_failure(error: BaseException) -> bool:
    """Whether `error` is a failed write of the file system rather than a mistake of the caller:
    an OSError, or one h5py raises as RuntimeError or ValueError with HDF5's errno inside."""
    if isinstance(error, OSError):
        return True
    return isinstance(error, (RuntimeError, ValueError)) and bool(re.search(r"errno = \d+|write failed", str(error)))


def failure_reason(error: BaseException) -> str:
    """A failed write in a few words: HDF5 reports one over several lines with the errno inside
    (`errno = 28, error message = ...`), torch as a RuntimeError; the user needs the cause."""
    text = str(error)
    found = re.search(r"errno = (\d+)", text)
    if found:
        return os.strerror(int(found[1]))
    text = " ".join(text.split())
    return (text if len(text) <= 200 else text[:197] + "...") or type(error).__name__


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
