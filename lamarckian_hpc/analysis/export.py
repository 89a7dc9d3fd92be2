"""`lamarckian-hpc export`: a run file's metrics as TensorBoard event files and as CSV, for users
who follow runs in TensorBoard or a spreadsheet. It only reads the run file (complete, growing or
killed: every complete row flushed so far), so it can be run again while the run goes on.

Both exports go to `DIR/<run name>/`, so one DIR holds many runs side by side (`tensorboard
--logdir DIR` lists them by name):

- TensorBoard: one event file, a scalar series per metric, tagged with the metric's name. The
  step is the row's `env_frames`; the event's wall time is the run's start (/meta `start_time`)
  plus the row's `wall_time`, or the row's `wall_time` alone when the start is not recorded.
  TensorBoard keeps scalars as 32-bit floats. The event file carries the suffix
  `.lamarckian-hpc`; exporting again replaces the run's earlier event files of that suffix (an
  earlier export's, or those the live sink wrote while it ran), and nothing else.
- CSV: one file per metric, `<metric>.csv`, with the columns of the run file's
  `/metrics/<metric>` group (wall_time, env_frames, policy_version, value) at full precision.
  One file per metric rather than one wide table: metrics are written at different rows (the
  return only once episodes end), so a wide table would be mostly empty cells.

Metrics without rows are left out of both. TensorBoard files are written by
`storage.event_files.EventWriter`, the writer of the live sink (`storage.tensorboard`) too, with
`tensorboardX` (the `export` extra), imported only when asked for.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

from ..storage.event_files import (
    EVENT_FILE_SUFFIX,
    INSTALL_HINT,
    EventWriter,
    TensorBoardMissing,
    event_files,
    event_folder,
)
from .loader import RunData

__all__ = ["EVENT_FILE_SUFFIX", "INSTALL_HINT", "TensorBoardMissing", "export_csv", "export_tensorboard", "run_folder",
           "start_seconds"]


def run_folder(run: RunData, out_dir: str | Path) -> Path:
    return event_folder(out_dir, run.name)


def start_seconds(meta: dict[str, Any]) -> float:
    """The run's start as seconds since the epoch (/meta `start_time`, ISO 8601); 0.0 when it is
    missing or unreadable, so that wall times stay seconds since the start."""
    text = meta.get("start_time")
    if not isinstance(text, str):
        return 0.0
    try:
        start = datetime.datetime.fromisoformat(text)
    except ValueError:
        return 0.0
    if start.tzinfo is None:
        start = start.replace(tzinfo=datetime.UTC)
    return start.timestamp()


def export_csv(run: RunData, out_dir: str | Path) -> list[Path]:
    """`out_dir/<run>/<metric>.csv` for every metric with rows; returns the files written."""
    folder = run_folder(run, out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, rows in run.metrics.groupby("metric", sort=True):
        path = folder / f"{name}.csv"
        rows.drop(columns="metric").to_csv(path, index=False)
        written.append(path)
    return written


def export_tensorboard(run: RunData, out_dir: str | Path) -> Path:
    """One event file under `out_dir/<run>/` with every metric's rows as scalars; replaces the
    run's earlier event files (an earlier export's, or the live sink's). Raises TensorBoardMissing
    without tensorboardX."""
    folder = run_folder(run, out_dir)
    earlier = event_files(folder) if folder.is_dir() else []
    start = start_seconds(run.meta)
    try:
        writer = EventWriter(folder)
    except TensorBoardMissing as error:
        raise TensorBoardMissing(f"error: --tensorboard needs tensorboardX: {INSTALL_HINT}") from error
    try:
        for name, rows in run.metrics.groupby("metric", sort=True):
            for row in rows.itertuples(index=False):
                writer.scalars({str(name): float(row.value)}, int(row.env_frames), start + float(row.wall_time))
    finally:
        writer.close()
    for path in earlier:
        path.unlink()
    return writer.path
