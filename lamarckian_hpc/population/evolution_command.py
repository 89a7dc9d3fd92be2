"""An evolve run of NSGA-II, the GA, ES, CMA-ES or game balancing: the run file, a line every ten
generations, a continued run after the last saved generation (`population.command`), and the
summary its result table shows (for balancing, also the lineups to weaken)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import EvolveConfig
from ..run_result import CANNOT_START, RunFailed
from .evolution import EvolveProgram
from .command import population_command


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
