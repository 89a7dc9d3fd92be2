"""Files only their owner can read, from the moment they exist, and synced to disk before they count.

A cluster's file systems are shared with other users, so a run's record, its checkpoints and its
keys are created with a private mode given to `open` and `mkdir` (a `chmod` afterwards leaves a
window in which another user can open them). A file renamed into place must be synced first, and
its folder after, or a crash of the machine can leave the new name pointing at nothing.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path


def make_private_folder(folder: Path) -> None:
    """Create `folder` (and missing parents) readable by its owner only from the moment each exists;
    an existing folder is left as its owner set it."""
    missing = [parent for parent in (folder, *folder.parents) if not parent.exists()]
    for created in reversed(missing):
        try:
            os.mkdir(created, 0o700)
        except FileExistsError:  # made meanwhile by another process: its mode is its maker's
            continue
        os.chmod(created, 0o700)  # the umask may have taken the owner's own bits; never widens


def create_private_file(path: Path) -> int:
    """A new file at `path`, open for writing, readable by its owner only from the moment it exists
    (the mode is given to `open`, not set afterwards). A leftover file of that name (a temporary
    name a killed process left) is removed first; a symlink there is removed, never followed.
    Returns the descriptor."""
    path.unlink(missing_ok=True)
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)


def fsync_file(path: Path) -> None:
    """Put the data of the file at `path` on disk (a rename alone may reach the disk before it)."""
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def fsync_folder(folder: Path) -> None:
    """Put `folder`'s entries on disk, so that a rename or a new file in it survives a crash of the
    machine. File systems that cannot sync a folder (EINVAL) are left as they are."""
    descriptor = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        os.fsync(descriptor)
    except OSError as error:
        if error.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(descriptor)
