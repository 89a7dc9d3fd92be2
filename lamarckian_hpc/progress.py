"""Live console progress of a training run: frames, frames/s and the recent mean return.

On a terminal it is a rich progress bar; in a batch job's log (no terminal) it prints one plain
line per interval instead, so a Slurm output file stays readable.
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from .runtime import TrainResult, UpdateReport


def _format_return(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


class ConsoleProgress:
    def __init__(self, total_env_steps: int, console: Console | None = None, line_interval_seconds: float = 10.0) -> None:
        self.console = console or Console(stderr=True)
        self.total = total_env_steps
        self.line_interval_seconds = line_interval_seconds
        self._last_line = float("-inf")
        self._progress: Progress | None = None
        if self.console.is_terminal:
            self._progress = Progress(
                TextColumn("[bold]train"), BarColumn(), TextColumn("{task.completed:,.0f}/{task.total:,.0f} frames"),
                TextColumn("{task.fields[fps]} frames/s"), TextColumn("return {task.fields[ret]}"),
                TimeElapsedColumn(), TimeRemainingColumn(), console=self.console,
            )
            self._task = self._progress.add_task("train", total=total_env_steps, fps="-", ret="n/a")
            self._progress.start()

    def on_update_end(self, report: UpdateReport) -> None:
        fps = report.env_frames / max(report.wall_time, 1e-9)
        if self._progress is not None:
            self._progress.update(self._task, completed=min(report.env_frames, self.total), fps=f"{fps:,.0f}",
                                  ret=_format_return(report.recent_return_mean))
            return
        now = time.monotonic()
        if now - self._last_line >= self.line_interval_seconds:
            self._last_line = now
            self.console.print(
                f"frames {report.env_frames:,}/{self.total:,}  {fps:,.0f} frames/s  "
                f"return {_format_return(report.recent_return_mean)}  updates {report.update}  "
                f"wall {report.wall_time:.0f}s", highlight=False,
            )

    def on_train_end(self, result: TrainResult) -> None:
        if self._progress is not None:
            self._progress.stop()
