"""Fuzzing a learner with messages that pass the wire layer but are wrong, from a process of its own
holding the job's keys (benchmarks/reliability/learner_fuzz.py, with fewer messages): the learner counts every
one in `malformed_messages`, exactly, accepts every valid message sent among and after them, and
trains on those."""

from __future__ import annotations

import pytest
from fuzz_budget import examples

from benchmarks.reliability import learner_fuzz

pytestmark = pytest.mark.timeout(300)


def test_a_learner_outlives_a_stream_of_wrong_messages_and_counts_each():
    messages = examples(1000)
    result = learner_fuzz.run(messages, seed=1, timeout_seconds=120)
    assert result["learner_alive"], result["error"]
    assert result["sent_bad"] == messages and result["malformed_messages"] == messages, result
    assert result["sent_valid"] == learner_fuzz.expected_valid(messages) == result["accepted"], result
    assert result["hellos"] == {0: 1, 1: 1} and result["update_finite"], result
    assert result["distinct_mutations"] >= 60, result["mutations"]  # every kind of damage, on many fields
