"""`lamarckian-hpc evolve` for automated game testing (`algorithm.name: wuji`): runs the search,
writes every generation of policies to the run file (genome = the action sequence, objectives =
negated win score and novelty), writes the bug reports beside it as `<run>.bugs.json` (seed and
actions of each, and whether it replayed), and prints them beside what random play found with the
same budget. The search's state is saved beside the run file every
storage.checkpoint_interval_seconds and at the end, so that `evolve --resume` continues after the
last saved generation. Kept apart from `games.testing` so that the search itself needs neither
h5py nor rich."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from ..config.game_testing import GameTestingConfig
from ..runtime.checkpoint import checkpoint_path, save_run_state
from ..runtime.population_command import load_resume_state, run_closing
from ..storage import MEGABYTE, RunWriter, continue_run_file
from .data import GameDataError, load_game_data
from .testing import SearchResult, random_play, replay, search

METRIC_NAMES = ("bugs_found", "distinct_states", "best_win", "generation_seconds")
#: The `kind` of a game testing run's checkpoint (`runtime.checkpoint.save_run_state`).
CHECKPOINT_KIND = "wuji"


def bugs_path(run_path: Path) -> Path:
    return run_path.with_suffix(".bugs.json")


def game_testing_command(config: GameTestingConfig, path: Path, config_file: str | None, resume: bool = False) -> int:
    """Run the search into `path`; with `resume`, continue that run after its last saved generation."""
    try:
        data = load_game_data(config.game.data)
        if config.game.planted_bugs:
            data = data.with_bugs(**{name: True for name in config.game.planted_bugs})
    except GameDataError as error:
        print(error, file=sys.stderr)
        return 2
    console = Console(stderr=True)
    spec = config.algorithm
    state = None
    if resume:
        state = load_resume_state(path, CHECKPOINT_KIND)
        if state is None:
            return 2
        if int(state["episodes"]) >= spec.episodes:
            print(f"error: {path} has nothing left to do (it played {int(state['episodes'])} episodes, "
                  f"algorithm.episodes={spec.episodes}); resume it with a larger budget", file=sys.stderr)
            return 2
        # Rows of a generation after the checkpoint are dropped: the resumed search plays it again.
        writer = continue_run_file(path, METRIC_NAMES, int(state["generation"]))
        console.print(f"resuming {path} after generation {int(state['generation'])}", highlight=False)
    else:
        writer = RunWriter(path, config.to_json_dict(), METRIC_NAMES, meta={"config_file": str(config_file)},
                           population_shape=(data.testing.max_decisions, 2))
        console.print(f"run file: {path}", highlight=False)
    start = last = time.monotonic() - (0.0 if state is None else float(state["wall_time"]))
    saved = time.monotonic()

    def record(generation: int, result: SearchResult) -> None:
        nonlocal last
        now = time.monotonic()
        entry = result.history[-1]
        count = len(entry["ids"])
        writer.append_population({"generation": np.full(count, generation), "id": entry["ids"],
                                  "parent_ids": entry["parent_ids"], "genome": entry["genomes"],
                                  "objectives": entry["objectives"], "wall_time": np.full(count, now - last),
                                  "worker": np.zeros(count, dtype=np.int64)})
        writer.append_many({"bugs_found": float(len(result.bugs)), "distinct_states": float(result.distinct_states),
                            "best_win": result.best_win, "generation_seconds": now - last},
                           env_frames=result.episodes, policy_version=generation, wall_time=now - start)
        writer.flush_if_due(config.storage.metrics_interval_seconds)
        last = now

    def save(search_state: dict) -> None:
        """Every storage.checkpoint_interval_seconds and after the last generation, once its rows are on disk."""
        nonlocal saved
        interval = config.storage.checkpoint_interval_seconds
        due = interval is not None and time.monotonic() - saved >= interval
        if due or int(search_state["episodes"]) >= spec.episodes:
            writer.flush()
            save_run_state(checkpoint_path(path), CHECKPOINT_KIND, {**search_state, "wall_time": last - start},
                           int(config.storage.min_free_megabytes * MEGABYTE))
            saved = time.monotonic()

    found = run_closing(writer, path, lambda: search(data, spec.episodes, spec.population_size, config.seed,
                                                     spec.crossover_probability, spec.mutation_rate,
                                                     on_generation=record, on_state=save, resume=state))
    if isinstance(found, int):
        return found
    search_seconds = time.monotonic() - start
    baseline = random_play(data, spec.episodes, config.seed) if spec.compare_random else None
    reports = [{**report.to_json_dict(), "replays": replay(data, report).symptom == report.symptom}
               for report in found.bugs.values()]
    summary = {"episodes": found.episodes, "distinct_states": found.distinct_states, "bugs": reports,
               "search_seconds": search_seconds,
               "random_play": None if baseline is None else {
                   "episodes": baseline.episodes, "distinct_states": baseline.distinct_states,
                   "bugs": [report.to_json_dict() for report in baseline.bugs.values()]}}
    bugs_path(path).write_text(json.dumps(summary, indent=2))
    table = Table("symptom", "search: found at episode", "random play: found at episode", "actions", "detail",
                  title=f"bugs found in {found.episodes} episodes ({search_seconds:.1f} s)")
    symptoms = list(found.bugs) + [name for name in (baseline.bugs if baseline else {}) if name not in found.bugs]
    for symptom in symptoms:
        mine, theirs = found.bugs.get(symptom), baseline.bugs.get(symptom) if baseline else None
        shown = mine or theirs
        assert shown is not None
        table.add_row(symptom, str(mine.episode) if mine else "-",
                      str(theirs.episode) if theirs else ("-" if baseline else "not run"),
                      str(len(shown.actions)), shown.detail)
    Console().print(table)
    states = f"; random play {len(baseline.bugs)} bugs, {baseline.distinct_states} states" if baseline else ""
    console.print(f"search: {len(found.bugs)} bugs, {found.distinct_states} distinct states{states}; "
                  f"reports with seed and actions: {bugs_path(path)}", highlight=False)
    print(path)
    return 0
