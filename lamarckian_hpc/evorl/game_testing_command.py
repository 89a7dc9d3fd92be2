"""An evolve run of automated game testing (`algorithm.name: wuji`): runs the search on
the population workflow (`testing_program`), which records every generation of policies in the run
file (genome = the action sequence, objectives = negated win score and novelty) and saves the
search's state for `evolve --resume`; then writes the bug reports beside the run file as
`<run>.bugs.json` (seed and actions of each, and whether it replayed) and returns them with what
random play found with the same budget, which the commands print side by side."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ..config.game_testing import GameTestingConfig
from ..games.data import GameDataError, load_game_data
from ..games.testing import random_play, replay
from ..population.command import population_command
from ..run_result import CANNOT_START, RunFailed, RunResult
from .game_testing_program import CHECKPOINT_KIND, GameTestingProgram

__all__ = ["CHECKPOINT_KIND", "GameTestingSummary", "bugs_path", "print_game_testing_result", "run_game_testing"]


def bugs_path(run_path: Path) -> Path:
    return run_path.with_suffix(".bugs.json")


@dataclass(frozen=True)
class GameTestingSummary:
    """What the search found (`found`: bugs by symptom, episodes, distinct states), what random
    play found with the same budget (`baseline`, None when not compared), and where the reports are."""

    found: Any
    baseline: Any
    search_seconds: float
    bugs_file: Path


def run_game_testing(config: GameTestingConfig, path: Path, config_file: str | None,
                     resume: bool = False) -> GameTestingSummary:
    """Run the search into `path`; with `resume`, continue that run after its last saved generation."""
    try:
        data = load_game_data(config.game.data)
        if config.game.planted_bugs:
            data = data.with_bugs(**{name: True for name in config.game.planted_bugs})
    except GameDataError as error:
        raise RunFailed(str(error), CANNOT_START) from None
    spec = config.algorithm
    program = GameTestingProgram(config, data)
    run = population_command(program, config, path, config_file, resume, (data.testing.max_decisions, 2))
    found = program.result()
    baseline = random_play(data, spec.episodes, config.seed) if spec.compare_random else None
    reports = [{**report.to_json_dict(), "replays": replay(data, report).symptom == report.symptom}
               for report in found.bugs.values()]
    summary = {"episodes": found.episodes, "distinct_states": found.distinct_states, "bugs": reports,
               "search_seconds": run.wall_seconds,
               "random_play": None if baseline is None else {
                   "episodes": baseline.episodes, "distinct_states": baseline.distinct_states,
                   "bugs": [report.to_json_dict() for report in baseline.bugs.values()]}}
    bugs_path(path).write_text(json.dumps(summary, indent=2))
    return GameTestingSummary(found, baseline, run.wall_seconds, bugs_path(path))


def print_game_testing_result(result: RunResult, out: Console, err: Console) -> None:
    """Each symptom found, by the search and by random play, and where the bug reports are."""
    summary = result.summary
    found, baseline = summary.found, summary.baseline
    table = Table("symptom", "search: found at episode", "random play: found at episode", "actions", "detail",
                  title=f"bugs found in {found.episodes} episodes ({summary.search_seconds:.1f} s)")
    symptoms = list(found.bugs) + [name for name in (baseline.bugs if baseline else {}) if name not in found.bugs]
    for symptom in symptoms:
        mine, theirs = found.bugs.get(symptom), baseline.bugs.get(symptom) if baseline else None
        shown = mine or theirs
        table.add_row(symptom, str(mine.episode) if mine else "-",
                      str(theirs.episode) if theirs else ("-" if baseline else "not run"),
                      str(len(shown.actions)), shown.detail)
    out.print(table)
    states = f"; random play {len(baseline.bugs)} bugs, {baseline.distinct_states} states" if baseline else ""
    err.print(f"search: {len(found.bugs)} bugs, {found.distinct_states} distinct states{states}; "
              f"reports with seed and actions: {summary.bugs_file}", highlight=False)
