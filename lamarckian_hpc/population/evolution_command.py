"""An evolve run of NSGA-II, the GA, ES, CMA-ES or game balancing: the run file, a line every ten
generations, a continued run after the last saved generation (`population.command`), and the
summary and the result table the commands print of it (for balancing, also the lineups to weaken)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ..config import EvolveConfig
from ..run_result import CANNOT_START, RunFailed, RunResult
from .command import population_command
from .evolution import EvolveProgram


@dataclass(frozen=True)
class EvolutionSummary:
    """What an EC run found: its problem, the algorithm's quality rows (hypervolume or best
    objective), and for game balancing the imbalanced lineups (`games.report.BalanceSummary`)."""

    problem: str
    rows: tuple[tuple[str, str], ...]
    wall_seconds: float
    resumed_after: int | None
    balance: Any = None


def run_evolution(config: EvolveConfig, path: Path, config_file: str | None, resume: bool = False) -> EvolutionSummary:
    """Evolve into `path`; with `resume`, continue that run after its last saved generation."""
    try:
        program = EvolveProgram(config)
    except (ValueError, OSError, KeyError) as error:  # game data that cannot be read: one line
        raise RunFailed(f"error: {error}", CANNOT_START) from None
    problem = program.problem
    shape = (problem.describe().genome_length, program.num_objectives)
    names = getattr(problem, "genome_names", None)
    run = population_command(program, config, path, config_file, resume,
                             (*shape, tuple(names())) if names is not None else shape, cannot_resume=program.mismatch)
    balance = None
    if config.problem.name == "balance":  # the lineups the game's designers should weaken
        from ..games.report import summarize

        algorithm = program.algorithm
        balance = summarize(problem, algorithm.genomes, algorithm.objectives)  # type: ignore
    return EvolutionSummary(problem.describe().name, tuple(program.summary()), run.wall_seconds, run.resumed_after,
                            balance)


def print_evolution_result(result: RunResult, out: Console, err: Console) -> None:
    """The problem, the algorithm's quality rows and the wall time; for balancing, the lineups to weaken."""
    config, summary = result.config, result.summary
    table = Table(title="result", show_header=False)
    table.add_row("problem", summary.problem)
    table.add_row("algorithm", config.algorithm.name)
    table.add_row("generations", str(config.algorithm.generations))
    if summary.resumed_after is not None:
        table.add_row("resumed after generation", str(summary.resumed_after))
    for label, value in summary.rows:
        table.add_row(label, value)
    table.add_row("wall time", f"{summary.wall_seconds:.1f} s")
    out.print(table)
    if summary.balance is not None:  # the lineups the game's designers should weaken
        from ..games.report import print_summary

        print_summary(summary.balance, out)
