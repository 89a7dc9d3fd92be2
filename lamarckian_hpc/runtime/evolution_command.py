"""`lamarckian-hpc evolve` for NSGA-II, the GA, ES, CMA-ES and game balancing: the run file, a line
every ten generations, a result table (and for balancing the lineups to weaken), and
`evolve --resume` after the last saved generation (`population_command`)."""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ..config import EvolveConfig
from .evolution import EvolveProgram
from .population_command import population_command


def evolution_command(config: EvolveConfig, path: Path, config_file: str | None, resume: bool = False) -> int:
    """Evolve into `path`; with `resume`, continue that run after its last saved generation."""
    try:
        program = EvolveProgram(config)
    except (ValueError, OSError, KeyError) as error:  # game data that cannot be read: one line
        print(f"error: {error}", file=sys.stderr)
        return 2
    problem = program.problem
    shape = (problem.describe().genome_length, program.num_objectives)
    names = getattr(problem, "genome_names", None)
    run = population_command(program, config, path, config_file, resume,
                             (*shape, tuple(names())) if names is not None else shape, cannot_resume=program.mismatch)
    if isinstance(run, int):
        return run
    table = Table(title="result", show_header=False)
    table.add_row("problem", problem.describe().name)
    table.add_row("algorithm", config.algorithm.name)
    table.add_row("generations", str(config.algorithm.generations))
    if run.resumed_after is not None:
        table.add_row("resumed after generation", str(run.resumed_after))
    for label, value in program.summary():
        table.add_row(label, value)
    table.add_row("wall time", f"{run.wall_seconds:.1f} s")
    Console().print(table)
    if config.problem.name == "balance":  # the lineups the game's designers should weaken
        from ..games.report import print_summary, summarize

        algorithm = program.algorithm
        print_summary(summarize(problem, algorithm.genomes, algorithm.objectives), Console())  # type: ignore
    print(path)
    return 0
