"""Automated game testing: with the four planted bugs on, the search over win and novelty finds at
least three within 600 episodes, more than random play finds with the same budget (fixed seeds);
every recorded bug replays from its seed and actions; a run file records the search."""

from __future__ import annotations

import numpy as np
import pytest

from lamarckian_hpc.games import BUG_NAMES, load_game_data
from lamarckian_hpc.games.testing import random_play, replay, search

BUDGET = 600


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
