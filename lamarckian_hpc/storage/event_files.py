"""TensorBoard event files: the one writer behind `lamarckian-hpc export --tensorboard` (a run file's
rows, after the fact) and the live TensorBoard sink of a running run (`storage.tensorboard`).

Both write `DIR/<run name>/events.out.tfevents.<ns>.<host>.lamarckian-hpc`: one folder per run, so
that `tensorboard --logdir DIR` lists runs side by side by name, and scalar series tagged with the
run file's metric names, the step being env frames (the live sink of a population run: the
generation). TensorBoard keeps scalars as 32-bit floats.
The suffix marks the files as ours: an export replaces the run's earlier event files of that
suffix and nothing else. Names start with the time in nanoseconds, so TensorBoard, which reads a
folder's files in name order, reads a resumed run's files in the order they were written.

Events go to the file as they are added (tensorboardX's record format and protobufs, the `export`
extra, imported only when a writer is opened); `flush` puts them on disk (and syncs), so a reader
sees every event up to the last flush and nothing is held in a queue or a thread. A resumed run
opens its file with `purge_step`, its first step: TensorBoard then drops the earlier files' events
at that step and later (the rows the run file dropped too), and no series goes back in steps.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping
from pathlib import Path

#: Suffix of the event files the package writes, so that a new export replaces only its own.
EVENT_FILE_SUFFIX = ".lamarckian-hpc"
INSTALL_HINT = "pip install -c constraints.txt -e '.[export]' (or pip install 'tensorboardX>=2.6.2.2')"


class TensorBoardMissing(ImportError):
    """tensorboardX is not installed; the message says how to install it."""


def event_folder(out_dir: str | Path, run_name: str) -> Path:
    """Where a run's event files go: `out_dir/<run name>/`."""
    return Path(out_dir) / run_name


def event_files(folder: Path) -> list[Path]:
    """The event files the package wrote in `folder`, in the order they were written."""
    return sorted(folder.glob(f"events.out.tfevents.*{EVENT_FILE_SUFFIX}"))


class EventWriter:
    """Writes scalars to a new event file in `folder` (made if missing). Raises TensorBoardMissing
    without tensorboardX, OSError when the file cannot be made."""

    def __init__(self, folder: str | Path, purge_step: int | None = None) -> None:
        try:
            from tensorboardX.proto.event_pb2 import Event, SessionLog
            from tensorboardX.proto.summary_pb2 import Summary
            from tensorboardX.record_writer import RecordWriter
        except ImportError:
            raise TensorBoardMissing(f"TensorBoard event files need tensorboardX: {INSTALL_HINT}") from None
        self._event, self._summary = Event, Summary
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / f"events.out.tfevents.{time.time_ns()}.{socket.gethostname()}{EVENT_FILE_SUFFIX}"
        self._records = RecordWriter(str(self.path))
        self._write(Event(wall_time=time.time(), file_version="brain.Event:2"))
        if purge_step is not None:
            self._write(Event(wall_time=time.time(), step=int(purge_step),
                              session_log=SessionLog(status=SessionLog.START)))

    def _write(self, event: object) -> None:
        self._records.write(event.SerializeToString())  # type: ignore[attr-defined]

    def scalars(self, values: Mapping[str, float], step: int, wall_time: float | None = None) -> None:
        """One event holding a value per tag, at `step`; `wall_time` (seconds since the epoch)
        defaults to now."""
        if not values:
            return
        summary = self._summary(value=[self._summary.Value(tag=str(tag), simple_value=float(value))
                                       for tag, value in values.items()])
        self._write(self._event(wall_time=time.time() if wall_time is None else float(wall_time), step=int(step),
                                summary=summary))

    def flush(self) -> None:
        self._records.flush()

    def close(self) -> None:
        try:
            self._records.flush()
        finally:
            self._records.close()
