"""An evolve run of a PBT config: the run file, a line per interval, a continued run after its last
saved interval (`population.command`), and PBT's result."""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Console

from ..config import PBTConfig
from ..population.command import population_command
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
