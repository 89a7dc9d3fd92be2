"""An evolve (or league) run of a league config: the run file with its `/league` group, a line per
generation, a continued run after the last saved generation (`population.command`), and
the league's state at the end, with the table the commands print of it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ..config.league_run import LeagueRunConfig
from ..league.store import LeagueRunWriter
from ..population.command import population_command
from ..run_result import RunResult
from .league_ppo import LeagueProgram, trajectory_options


@dataclass(frozen=True)
class LearnerRow:
    """One learner of the league at the end: its Elo, its last win rate against the opponents it
    was matched with (None before any), and its updates since its last snapshot."""

    name: str
    elo: float
    win_rate: float | None
    updates: int


@dataclass(frozen=True)
class LeagueSummary:
    generations: int
    wall_seconds: float
    members: int
    snapshots: int
    learners: tuple[LearnerRow, ...]
    #: (generation, mean score of the main agents against the scripted player), first and last
    scripted: tuple[tuple[int, float], ...] = ()


def run_league(config: LeagueRunConfig, path: Path, config_file: str | None, resume: bool = False) -> LeagueSummary:
    """Run the league into `path`; with `resume`, continue that run after its last saved generation."""
    program = LeagueProgram(config)
    run = population_command(program, config, path, config_file, resume, None, cannot_resume=program.mismatch,
                             writer_class=LeagueRunWriter,
                             writer_options={"league_capacity": config.league.capacity,
                                             **trajectory_options(config)})
    league, last = program.league, program.last_metrics
    learners = tuple(LearnerRow(name, float(league.elo[index]), last.get(f"win_rate_vs_targets_{name}"),
                                league.members[index].updates) for index, name in enumerate(program.names))
    scores = program.scripted_scores
    return LeagueSummary(program.generation, run.wall_seconds, len(league.members), len(league.snapshots), learners,
                         (scores[0], scores[-1]) if scores else ())


def print_league_result(result: RunResult, out: Console, err: Console) -> None:
    """Each learner's Elo, win rate and updates; on stderr, how the main agents fare against the scripted player."""
    summary = result.summary
    table = Table("learner", "Elo", "win rate vs its targets", "updates since snapshot",
                  title=f"league after {summary.generations} generations ({summary.wall_seconds:.0f} s, "
                        f"{summary.members} members, {summary.snapshots} snapshots)")
    for learner in summary.learners:
        table.add_row(learner.name, f"{learner.elo:.0f}", "-" if learner.win_rate is None else f"{learner.win_rate:.2f}",
                      str(learner.updates))
    out.print(table)
    if summary.scripted:
        first, last = summary.scripted
        err.print(f"main agents against the scripted player: {first[1]:+.2f} after generation "
                  f"{first[0] + 1}, {last[1]:+.2f} after generation {last[0] + 1}", highlight=False)
