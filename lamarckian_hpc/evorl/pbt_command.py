"""An evolve run of a PBT config: the run file, a line per interval, a continued run after its last
saved interval (`population.command`), and PBT's result and the table the commands print of it."""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ..config import PBTConfig
from ..population.command import population_command
from ..run_result import RunResult
from .pbt_ppo import PBTProgram, PBTResult, mismatch, population_shape, progress_line, trajectory_options


def run_pbt(config: PBTConfig, path: Path, config_file: str | None, resume: bool = False) -> PBTResult:
    """Run PBT into `path`; with `resume`, continue that run after its last saved interval."""
    console = Console(stderr=True)
    names = tuple(config.algorithm.hyperparameters)
    program = PBTProgram(config, lambda report: console.print(progress_line(report, names), highlight=False,
                                                              soft_wrap=True))
    started_at = time.time()
    run = population_command(program, config, path, config_file, resume, population_shape(config),
                             unit="interval", cannot_resume=lambda state: mismatch(config, state),
                             writer_options=trajectory_options(config))
    return program.result(run.wall_seconds, started_at)


def print_pbt_result(result: RunResult, out: Console, err: Console) -> None:
    """The population, the intervals, the frames and the best member, in one table."""
    config, summary = result.config, result.summary
    table = Table(title="result", show_header=False)
    table.add_row("population", str(config.algorithm.population_size))
    table.add_row("intervals", str(summary.intervals))
    table.add_row("env frames (all members)", f"{summary.env_frames:,}")
    table.add_row("wall time", f"{summary.wall_time_seconds:.1f} s")
    table.add_row("best member", f"id {summary.best_id}, mean return {summary.best_return:.1f}")
    if config.stop.target_return is not None:
        first = summary.first_reached_seconds
        table.add_row(f"target {config.stop.target_return:g}",
                      f"first reached after {first:.1f} s" if first is not None else "not reached")
    out.print(table)
