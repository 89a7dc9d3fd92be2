"""The vectorized GAE and V-trace scans against the step-by-step loops they replaced.

The references below are the former implementations, copied (V-trace's with the bootstrap of an unmarked last step mended): a backwards Python loop
over every step of the flat sequence. Hypothesis draws fragment layouts (lengths from 1 to past
the block size, all equal or not, a last fragment without its end mark) and the discounts and
clips; numpy draws the values from a seed it picks.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lamarckian_hpc.rl.returns import generalized_advantages, next_values_of_fragments, reverse_fragment_scan
from lamarckian_hpc.rl.vtrace import vtrace

TOLERANCE = {"rtol": 1e-6, "atol": 1e-9}
EXAMPLES = settings(max_examples=60, deadline=None, derandomize=True, database=None)


def reference_gae(rewards, values, next_values, segment_ends, gamma, gae_lambda):
    deltas = rewards + gamma * next_values - values
    carry = gamma * gae_lambda * (1.0 - segment_ends.astype(np.float64))
    advantages = np.empty(len(rewards), dtype=np.float64)
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = deltas[t] + carry[t] * running
        advantages[t] = running
    return advantages.astype(np.float32)


def reference_vtrace(behaviour_log_probs, target_log_probs, rewards, values, next_values, segment_ends,
                     gamma, rho_bar=1.0, c_bar=1.0):
    ratios = np.exp(target_log_probs.astype(np.float64) - behaviour_log_probs)
    rhos, cs = np.minimum(rho_bar, ratios), np.minimum(c_bar, ratios)
    deltas = rhos * (rewards + gamma * next_values - values)
    corrections = np.empty(len(rewards), dtype=np.float64)  # vs_t - V_t
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        if segment_ends[t]:
            running = 0.0
        running = deltas[t] + gamma * cs[t] * running
        corrections[t] = running
    vs = values + corrections
    next_vs = np.where(segment_ends, next_values, np.append(vs[1:], next_values[-1:]))
    advantages = rhos * (rewards + gamma * next_vs - values)
    return vs.astype(np.float32), advantages.astype(np.float32)


def reference_scan(terms, factors, segment_ends):
    result = np.empty(len(terms), dtype=np.float64)
    running = 0.0
    for t in range(len(terms) - 1, -1, -1):
        if segment_ends[t]:
            running = 0.0
        running = terms[t] + factors[t] * running
        result[t] = running
    return result


def experience(lengths, unmarked_tail: bool, seed: int):
    """Float32 steps of fragments of `lengths` as the learners see them, with random terminations."""
    rng = np.random.default_rng(seed)
    lengths = np.asarray(lengths)
    count = int(lengths.sum())
    values = rng.normal(size=count).astype(np.float32)
    next_values, ends = next_values_of_fragments(
        values, lengths, rng.normal(size=len(lengths)).astype(np.float32), rng.random(len(lengths)) < 0.5
    )
    if unmarked_tail:  # the sequence stops mid-fragment
        ends[-1] = False
    return {
        "rewards": rng.normal(size=count).astype(np.float32),
        "values": values,
        "next_values": next_values,
        "segment_ends": ends,
        "behaviour_log_probs": np.log(rng.uniform(0.05, 1.0, size=count)).astype(np.float32),
        "target_log_probs": np.log(rng.uniform(0.05, 1.0, size=count)).astype(np.float32),
    }


fragment_length = st.one_of(st.integers(1, 4), st.integers(1, 80), st.sampled_from([1, 16, 17, 300]))
layouts = st.one_of(
    st.lists(fragment_length, min_size=1, max_size=12),
    st.tuples(fragment_length, st.integers(1, 12)).map(lambda pair: [pair[0]] * pair[1]),  # equal lengths
)
unit = st.floats(0.0, 1.0)
clip = st.floats(0.05, 3.0)


def gae_of(steps, gamma, gae_lambda, function):
    return function(steps["rewards"], steps["values"], steps["next_values"], steps["segment_ends"], gamma, gae_lambda)


def vtrace_of(steps, gamma, rho_bar, c_bar, function):
    return function(steps["behaviour_log_probs"], steps["target_log_probs"], steps["rewards"], steps["values"],
                    steps["next_values"], steps["segment_ends"], gamma, rho_bar, c_bar)


@EXAMPLES
@given(layouts, st.booleans(), st.integers(0, 2**32 - 1), unit, unit)
def test_gae_matches_the_step_by_step_loop(lengths, unmarked_tail, seed, gamma, gae_lambda):
    steps = experience(lengths, unmarked_tail, seed)
    advantages = gae_of(steps, gamma, gae_lambda, generalized_advantages)
    assert advantages.dtype == np.float32 and advantages.shape == (sum(lengths),)
    np.testing.assert_allclose(advantages, gae_of(steps, gamma, gae_lambda, reference_gae), **TOLERANCE)


@EXAMPLES
@given(layouts, st.booleans(), st.integers(0, 2**32 - 1), unit, clip, clip)
def test_vtrace_matches_the_step_by_step_loop(lengths, unmarked_tail, seed, gamma, rho_bar, c_bar):
    steps = experience(lengths, unmarked_tail, seed)
    vs, advantages = vtrace_of(steps, gamma, rho_bar, c_bar, vtrace)
    expected_vs, expected_advantages = vtrace_of(steps, gamma, rho_bar, c_bar, reference_vtrace)
    assert vs.dtype == advantages.dtype == np.float32
    np.testing.assert_allclose(vs, expected_vs, **TOLERANCE)
    np.testing.assert_allclose(advantages, expected_advantages, **TOLERANCE)


@EXAMPLES
@given(layouts, st.booleans(), st.integers(0, 2**32 - 1))
def test_scan_keeps_float64_and_the_loops_values(lengths, unmarked_tail, seed):
    rng = np.random.default_rng(seed)
    count = sum(lengths)
    ends = np.zeros(count, dtype=bool)
    ends[np.cumsum(lengths) - 1] = True
    ends[-1] = not unmarked_tail
    terms, factors = rng.normal(size=count), rng.uniform(0.0, 1.2, size=count)
    result = reverse_fragment_scan(terms, factors, ends)
    assert result.dtype == np.float64
    expected = reference_scan(terms, factors, ends)
    if max(lengths) <= 16:  # scanned row by row: the loop's arithmetic, bit for bit
        np.testing.assert_array_equal(result, expected)
    else:  # cut into blocks: a few ulps of float64
        np.testing.assert_allclose(result, expected, rtol=1e-12, atol=1e-12)


def test_empty_sequence_gives_empty_float32_outputs():
    empty = np.zeros(0, dtype=np.float32)
    no_ends = np.zeros(0, dtype=bool)
    advantages = generalized_advantages(empty, empty, empty, no_ends, 0.99, 0.95)
    vs, vtrace_advantages = vtrace(empty, empty, empty, empty, empty, no_ends, 0.99)
    for array in (advantages, vs, vtrace_advantages):
        assert array.dtype == np.float32 and array.shape == (0,)


def test_sequence_without_any_end_mark_is_one_fragment():
    steps = experience([37], unmarked_tail=True, seed=3)
    assert not steps["segment_ends"].any()
    np.testing.assert_allclose(gae_of(steps, 0.9, 0.8, generalized_advantages),
                               gae_of(steps, 0.9, 0.8, reference_gae), **TOLERANCE)
    expected_both = vtrace_of(steps, 0.9, 1.0, 1.0, reference_vtrace)
    for got, expected in zip(vtrace_of(steps, 0.9, 1.0, 1.0, vtrace), expected_both):
        np.testing.assert_allclose(got, expected, **TOLERANCE)


def test_large_batches_match_the_loop():
    for lengths in ([128] * 64, [4096] * 8, [4096, 3, 1, 700, 2048]):
        steps = experience(lengths, unmarked_tail=False, seed=len(lengths))
        np.testing.assert_allclose(gae_of(steps, 0.99, 0.95, generalized_advantages),
                                   gae_of(steps, 0.99, 0.95, reference_gae), **TOLERANCE)
        for got, expected in zip(vtrace_of(steps, 0.99, 1.0, 1.0, vtrace),
                                 vtrace_of(steps, 0.99, 1.0, 1.0, reference_vtrace)):
            np.testing.assert_allclose(got, expected, **TOLERANCE)


def test_vtrace_bootstraps_the_last_step_of_an_unmarked_sequence_from_its_next_value():
    """The step after the last one is the bootstrap value, not the first step of the sequence."""
    rewards, values = np.array([1.0, 2.0, 3.0]), np.array([10.0, 20.0, 30.0])
    next_values = np.array([20.0, 30.0, 7.0])
    log_probs = np.zeros(3)
    vs, advantages = vtrace(log_probs, log_probs, rewards, values, next_values, np.zeros(3, dtype=bool), gamma=0.5)
    assert advantages[-1] == pytest.approx(3.0 + 0.5 * 7.0 - 30.0)
    assert vs[-1] == pytest.approx(3.0 + 0.5 * 7.0)
