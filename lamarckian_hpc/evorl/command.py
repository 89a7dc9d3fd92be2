"""`lamarckian-hpc evolve` for a PBT config: the run file, a line per interval and a result table,
and `evolve --resume` of such a run after its last saved interval (`runtime.population_command`)."""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ..config import PBTConfig
from ..runtime.population_command import population_command
from .pbt_ppo import PBTProgram, mismatch, population_shape, progress_line


def pbt_command(config: PBTConfig, path: Path, config_file: str | None, resume: bool = False) -> int:
    """Run PBT into `path`; with `resume`, continue that run after its last saved interval."""
    console = Console(stderr=True)
    names = tuple(config.algorithm.hyperparameters)
    program = PBTProgram(config, lambda report: console.print(progress_line(report, names), highlight=False,
                                                              soft_wrap=True))
    started_at = time.time()
    run = population_command(program, config, path, config_file, resume, population_shape(config),
                             unit="interval", cannot_resume=lambda state: mismatch(config, state))
    if isinstance(run, int):
        return run
    result = program.result(run.wall_seconds, started_at)
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
