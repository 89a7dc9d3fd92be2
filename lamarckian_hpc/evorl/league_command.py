"""`lamarckian-hpc evolve` (or `lamarckian-hpc league`) for a league config: the run file with its
`/league` group, a line per generation, a table of the learners at the end, and `--resume` after
the last saved generation (`runtime.population_command`)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from ..config.league_run import LeagueRunConfig
from ..league.store import LeagueRunWriter
from ..runtime.population_command import population_command
from .league_ppo import LeagueProgram


def league_command(config: LeagueRunConfig, path: Path, config_file: str | None, resume: bool = False) -> int:
    """Run the league into `path`; with `resume`, continue that run after its last saved generation."""
    program = LeagueProgram(config)
    run = population_command(program, config, path, config_file, resume, None, cannot_resume=program.mismatch,
                             writer_class=LeagueRunWriter,
                             writer_options={"league_capacity": config.league.capacity})
    if isinstance(run, int):
        return run
    league = program.league
    table = Table("learner", "Elo", "win rate vs its targets", "updates since snapshot",
                  title=f"league after {program.generation} generations ({run.wall_seconds:.0f} s, "
                        f"{len(league.members)} members, {len(league.snapshots)} snapshots)")
    last = program.last_metrics
    for index, name in enumerate(program.names):
        rate = last.get(f"win_rate_vs_targets_{name}")
        table.add_row(name, f"{league.elo[index]:.0f}", "-" if rate is None else f"{rate:.2f}",
                      str(league.members[index].updates))
    Console().print(table)
    if program.scripted_scores:
        first, last = program.scripted_scores[0], program.scripted_scores[-1]
        Console(stderr=True).print(f"main agents against the scripted player: {first[1]:+.2f} after generation "
                                   f"{first[0] + 1}, {last[1]:+.2f} after generation {last[0] + 1}", highlight=False)
    print(path)
    return 0
