"""Automated game testing: with the four planted bugs on, the search over win and novelty finds at
least three within 1,000 episodes, more than random play finds with the same budget (fixed seed);
every recorded bug replays from its seed and actions; `evolve configs/game_testing.yaml` records
the search in a run file and the bugs beside it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lamarckian_hpc.evorl.game_testing_program import search
from lamarckian_hpc.games import BUG_NAMES, load_game_data
from lamarckian_hpc.games.testing import random_play, replay

ROOT = Path(__file__).resolve().parents[1]
BUDGET = 1000


@pytest.fixture(scope="module")
def buggy():
    return load_game_data().with_bugs(**{name: True for name in BUG_NAMES})


@pytest.fixture(scope="module")
def searched(buggy):
    return search(buggy, BUDGET, population_size=20, seed=0)


def test_search_finds_more_planted_bugs_than_random_play(buggy, searched):
    random = random_play(buggy, BUDGET, seed=0)
    print(f"search: {sorted(searched.bugs)} in {searched.episodes} episodes, {searched.distinct_states} states; "
          f"random: {sorted(random.bugs)}, {random.distinct_states} states")
    assert searched.episodes == random.episodes == BUDGET
    assert len(searched.bugs) >= 3
    assert len(searched.bugs) > len(random.bugs)
    assert searched.distinct_states > random.distinct_states  # novelty pays: more of the game explored


def test_every_recorded_bug_replays_from_its_seed_and_actions(buggy, searched):
    reports = list(searched.bugs.values()) + list(random_play(buggy, 100, seed=1).bugs.values())
    assert reports
    for report in reports:
        result = replay(buggy, report)
        assert result.symptom == report.symptom, report
        assert tuple(result.actions) == report.actions
        assert result.detail == report.detail


def test_history_keeps_lineage(searched):
    assert len(searched.history) >= 2
    last = searched.history[-1]
    assert last["genomes"].shape == (20, load_game_data().testing.max_decisions)
    assert last["objectives"].shape == (20, 2)
    earlier = np.concatenate([entry["ids"] for entry in searched.history[:-1]])
    children = last["parent_ids"][last["parent_ids"][:, 0] >= 0]
    assert set(children.ravel().tolist()) <= set(earlier.tolist()) | set(last["ids"].tolist())


def test_no_bug_found_when_none_is_planted():
    assert search(load_game_data(), 100, population_size=20, seed=0).bugs == {}


def test_evolve_command_runs_the_game_testing_search(tmp_path, capsys):
    import json

    from lamarckian_hpc.cli import main
    from lamarckian_hpc.storage import open_run

    status = main(["evolve", str(ROOT / "configs" / "game_testing.yaml"), "algorithm.episodes=120",
                   "algorithm.compare_random=false", f"storage.directory={tmp_path}", "storage.run_name=testing"])
    assert status == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == str(tmp_path / "testing.h5")
    with open_run(tmp_path / "testing.h5") as run:
        assert run.closed_cleanly
        population = run.population()
        assert sorted(set(population["generation"].tolist())) == list(range(6))  # 20 initial + 5 x 20 offspring
        assert population["genome"].shape[1] == load_game_data().testing.max_decisions
        assert len(run.metric("bugs_found")) == 6
    summary = json.loads((tmp_path / "testing.bugs.json").read_text())
    assert summary["episodes"] == 120 and summary["bugs"]
    assert all(report["replays"] and report["seed"] == 0 and report["actions"] for report in summary["bugs"])


def test_bad_game_testing_config_is_one_line(tmp_path, capsys):
    from lamarckian_hpc.cli import main

    status = main(["evolve", str(ROOT / "configs" / "game_testing.yaml"), "game.planted_bugs=[typo]",
                   f"storage.directory={tmp_path}"])
    assert status == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "game.planted_bugs" in error and "damage_overflow" in error
