"""`lamarckian-hpc evolve` for a PBT config: the run file, a line per interval, a result table; and
`evolve --resume` of such a run from the checkpoint saved at the end of its last interval."""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ..config import PBTConfig
from ..runtime.checkpoint import checkpoint_path
from ..runtime.resumable_run import load_resume_state, run_closing
from ..storage import MEGABYTE, RunWriter, continue_run_file
from .pbt_ppo import (CHECKPOINT_KIND, METRIC_NAMES, finished_reason, mismatch, population_shape, progress_line,
                      run_pbt)


def pbt_command(config: PBTConfig, path: Path, config_file: str | None, resume: bool = False) -> int:
    """Run PBT into `path`; with `resume`, continue that run after its last saved interval."""
    console = Console(stderr=True)
    state = None
    if resume:
        state = load_resume_state(path, CHECKPOINT_KIND)
        if state is None:
            return 2
        problem = mismatch(config, state)
        if problem is not None:
            print(f"error: {path} cannot be resumed: {problem}", file=sys.stderr)
            return 2
        reason = finished_reason(config, state)
        if reason is not None:
            print(f"error: {path} has nothing left to do ({reason}); resume it with a larger budget",
                  file=sys.stderr)
            return 2
        # Rows of an interval after the checkpoint are dropped: the resumed run trains it again.
        writer = continue_run_file(path, METRIC_NAMES, int(state["interval"]) - 1)
        console.print(f"resuming {path} after interval {int(state['interval']) - 1}", highlight=False)
    else:
        writer = RunWriter(path, config.to_json_dict(), METRIC_NAMES, meta={"config_file": str(config_file)},
                           population_shape=population_shape(config))  # type: ignore[arg-type]
        console.print(f"run file: {path}", highlight=False)
    names = tuple(config.algorithm.hyperparameters)
    result = run_closing(writer, path, lambda: run_pbt(
        config, writer, lambda report: console.print(progress_line(report, names), highlight=False, soft_wrap=True),
        checkpoint=checkpoint_path(path), resume=state, reserve_bytes=int(config.storage.min_free_megabytes * MEGABYTE)),
        interrupted_after="interval")
    if isinstance(result, int):
        return result
    table = Table(title="result", show_header=False)
    table.add_row("population", str(config.algorithm.population_size))
    table.add_row("intervals", str(result.intervals))
    table.add_row("env frames (all members)", f"{result.env_frames:,}")
    table.add_row("wall time", f"{result.wall_time_seconds:.1f} s")
    table.add_row("best member", f"id {result.best_id}, mean return {result.best_return:.1f}")
    if config.stop.target_return is not None:
        first = result.first_reached_seconds
        table.add_row(f"target {config.stop.target_return:g}",
                      f"first reached after {first:.1f} s" if first is not None else "not reached")
    Console().print(table)
    print(path)
    return 0
