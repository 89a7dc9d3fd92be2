"""The game testing search as an ask/tell algorithm: it gives the interface of `ec.ask_tell`,
takes episode outcomes as plain data (as a worker process would send them), re-scores its
members' novelty as the archive grows, and continues exactly from a state that went through
msgpack."""

from __future__ import annotations

import numpy as np
import pytest
from plain_state import through_msgpack

from lamarckian_hpc.ec.ask_tell import AskTell
from lamarckian_hpc.evorl.game_testing_program import search
from lamarckian_hpc.games import BUG_NAMES, load_game_data
from lamarckian_hpc.games.testing import EpisodeOutcome, GameTestingSearch, episode_outcome


@pytest.fixture(scope="module")
def buggy():
    return load_game_data().with_bugs(**{name: True for name in BUG_NAMES})


def _round(searcher: GameTestingSearch, data) -> list[dict]:
    genomes = searcher.ask()
    plain = [through_msgpack(episode_outcome(data, searcher.seed, genome).to_plain()) for genome in genomes]
    searcher.tell(genomes, plain)
    return plain


def test_the_search_gives_the_interface_and_takes_plain_outcomes(buggy):
    searcher = GameTestingSearch(buggy.testing.max_decisions, 10, seed=3)
    assert isinstance(searcher, AskTell)
    _round(searcher, buggy)
    assert (searcher.told_parent_ids == -1).all() and searcher.counter.next_id == 10
    for _ in range(3):
        genomes = searcher.ask()
        parents = searcher.asked_parent_ids.copy()
        searcher.tell(genomes, [episode_outcome(buggy, 3, genome) for genome in genomes])
        np.testing.assert_array_equal(searcher.told_parent_ids, parents)
        assert (searcher.told_parent_ids >= 0).all()
        assert searcher.told_objectives.shape == (10, 2)
        # every member, parents included, is scored with the archive as it is now
        archive = searcher.findings.archive
        replayed = [episode_outcome(buggy, 3, genome) for genome in searcher.genomes]
        np.testing.assert_array_equal(searcher.objectives[:, 0], [-outcome.win for outcome in replayed])
        np.testing.assert_array_equal(searcher.objectives[:, 1],
                                      [-archive.novelty(outcome.signature_set()) for outcome in replayed])
    assert searcher.findings.episodes == 40 and searcher.genomes.shape == (10, buggy.testing.max_decisions)


def test_an_outcome_survives_its_plain_form(buggy):
    outcome = episode_outcome(buggy, 0, np.zeros(buggy.testing.max_decisions))
    again = EpisodeOutcome.from_plain(through_msgpack(outcome.to_plain()))
    assert again.win == outcome.win and again.symptom == outcome.symptom and again.detail == outcome.detail
    np.testing.assert_array_equal(again.signatures, outcome.signatures)
    np.testing.assert_array_equal(again.actions, outcome.actions)
    assert outcome.signatures.dtype == np.int64 and outcome.signatures.ndim == 2


def test_a_loaded_search_continues_exactly(buggy):
    original = GameTestingSearch(buggy.testing.max_decisions, 10, seed=1)
    for _ in range(4):
        _round(original, buggy)
    loaded = GameTestingSearch(buggy.testing.max_decisions, 10, seed=1)
    loaded.load_state_dict(through_msgpack(original.state_dict()))
    for _ in range(3):
        expected, continued = original.ask(), loaded.ask()
        np.testing.assert_array_equal(continued, expected)
        outcomes = [episode_outcome(buggy, 1, genome) for genome in expected]
        original.tell(expected, outcomes)
        loaded.tell(continued, outcomes)
        np.testing.assert_array_equal(loaded.objectives, original.objectives)
        np.testing.assert_array_equal(loaded.ids, original.ids)
    assert loaded.findings.bugs == original.findings.bugs
    assert loaded.findings.archive.counts == original.findings.archive.counts


def test_the_search_function_stops_at_its_budget_mid_generation(buggy):
    result = search(buggy, 25, population_size=10, seed=0)
    assert result.episodes == 25 and [len(entry["ids"]) for entry in result.history] == [10, 10, 10]


def test_an_odd_population_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="even"):
        GameTestingSearch(40, 7, seed=0)


def test_forked_workers_play_the_search_this_process_plays(buggy):
    """Episodes are pure functions of their genome: played on two forked workers, their outcomes
    come back as plain data over the pipes and the search goes exactly as in this process."""
    here = search(buggy, 60, population_size=10, seed=0)
    forked = search(buggy, 60, population_size=10, seed=0, mode="fork", num_workers=2)
    assert forked.bugs == here.bugs and forked.distinct_states == here.distinct_states
    for ours, theirs in zip(here.history, forked.history, strict=True):
        np.testing.assert_array_equal(ours["genomes"], theirs["genomes"])
        np.testing.assert_array_equal(ours["objectives"], theirs["objectives"])
