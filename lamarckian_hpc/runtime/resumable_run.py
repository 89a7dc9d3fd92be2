"""What every resumable `evolve` command (PBT+PPO, EMOGI, game testing) does around its run: read
the state saved beside the run file for `--resume`, and close the run file on every way out, so
that an interrupt or a full disk ends with one line saying how to continue and leaves a file that
`evolve --resume` can pick up."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, TypeVar

from ..storage import RunWriter, StorageFullError
from .checkpoint import checkpoint_path, load_run_state

T = TypeVar("T")


def load_resume_state(path: Path, kind: str) -> dict[str, Any] | None:
    """The state saved beside `path` by a run of `kind`, or None once the reason it cannot be read
    (missing, damaged, another algorithm's) is printed as one line."""
    try:
        return load_run_state(checkpoint_path(path), kind)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return None


def run_closing(writer: RunWriter, path: Path, body: Callable[[], T], interrupted_after: str | None = None) -> T | int:
    """`body()`'s result after closing `writer` as completed, or the exit code after closing it as
    incomplete: 1 for a full disk, 130 for Ctrl-C when `interrupted_after` names what the run saves
    (an interval, a generation); any other error propagates."""
    hint = f"lamarckian-hpc evolve --resume {path}"
    try:
        result = body()
    except KeyboardInterrupt:
        writer.close(completed=False)
        if interrupted_after is None:
            raise
        print(f"interrupted; the run up to its last {interrupted_after} is in {path}; continue with: {hint}",
              file=sys.stderr)
        return 130
    except StorageFullError as error:
        writer.close(completed=False)
        print(f"error: {error}; continue later with: {hint}", file=sys.stderr)
        return 1
    except BaseException:
        writer.close(completed=False)
        raise
    writer.close()
    return result
