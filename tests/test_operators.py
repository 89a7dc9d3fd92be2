"""Operators keep every coding valid over many random draws (bounds hold, integers stay integral,
permutations stay permutations, bits stay 0/1), do what their names say, and selection picks
the better members."""

from __future__ import annotations

import numpy as np
import pytest

from lamarckian_hpc.ec import Coding, make_crossover, make_mutation, rank_and_crowding
from lamarckian_hpc.ec.operators import (
    bit_flip_mutation,
    crowded_tournament,
    integer_polynomial_mutation,
    integer_sbx,
    inversion_mutation,
    one_point_crossover,
    order_crossover,
    swap_mutation,
    tournament,
    uniform_crossover,
)
from lamarckian_hpc.ec.variation import CROSSOVER_CODINGS, MUTATION_CODINGS

CODINGS = {
    "real": Coding.real(np.array([-5.0, 0.0, 1e-4, -1.0, 2.0, -3.0]), np.array([5.0, 1.0, 1e-2, -0.5, 2.5, 7.0])),
    "integer": Coding.integer(np.array([-3, 0, 5, -10, 0, 1]), np.array([3, 1, 9, 10, 100, 2])),
    "binary": Coding.binary(12),
    "permutation": Coding.permutation(15),
}
PAIRS = [(kind, name) for name, kinds in CROSSOVER_CODINGS.items() for kind in kinds]
MUTATIONS = [(kind, name) for name, kinds in MUTATION_CODINGS.items() for kind in kinds]


@pytest.mark.parametrize("kind", CODINGS)
def test_sampling_gives_valid_genomes_and_invalid_ones_are_caught(kind):
    coding = CODINGS[kind]
    genomes = coding.sample(np.random.default_rng(0), 500)
    assert genomes.shape == (500, coding.length) and coding.valid(genomes).all()
    broken = genomes.copy()
    broken[0, 0] = coding.upper[0] + 1.0  # out of bounds
    broken[1, 1] = broken[1, 0]  # a duplicate (breaks permutations) or a value another variable holds
    broken[2, 2] = np.nan
    valid = coding.valid(broken)
    assert not valid[0] and not valid[2]
    if kind != "real":
        broken[3, 3] += 0.5  # not integral
        assert not coding.valid(broken)[3]
    if kind == "permutation":
        assert not valid[1]


@pytest.mark.parametrize("kind, name", PAIRS)
def test_every_crossover_keeps_its_coding_valid(kind, name):
    coding = CODINGS[kind]
    rng = np.random.default_rng(1)
    crossover = make_crossover(name, coding, probability=1.0)
    changed = 0
    for _ in range(50):
        a, b = coding.sample(rng, 40), coding.sample(rng, 40)
        child_a, child_b = crossover(a, b, rng)
        assert child_a.shape == a.shape and child_b.shape == b.shape
        assert coding.valid(child_a).all() and coding.valid(child_b).all()
        changed += int((child_a != a).any(axis=1).sum())
    assert changed > 0.5 * 50 * 40  # it really recombines


@pytest.mark.parametrize("kind, name", MUTATIONS)
def test_every_mutation_keeps_its_coding_valid(kind, name):
    coding = CODINGS[kind]
    rng = np.random.default_rng(2)
    mutation = make_mutation(name, coding)
    changed = 0
    for _ in range(50):
        genomes = coding.sample(rng, 40)
        mutated = mutation(genomes, rng)
        assert mutated.shape == genomes.shape and coding.valid(mutated).all()
        changed += int((mutated != genomes).any(axis=1).sum())
    assert changed > 0.2 * 50 * 40  # small integer ranges often round back


def test_operators_refuse_a_coding_they_would_break():
    with pytest.raises(ValueError, match="does not fit a permutation coding; use one of order"):
        make_crossover("uniform", CODINGS["permutation"])
    with pytest.raises(ValueError, match="does not fit a binary coding; use one of bit_flip"):
        make_mutation("polynomial", CODINGS["binary"])
    with pytest.raises(ValueError, match="unknown crossover 'pmx'"):
        make_crossover("pmx", CODINGS["permutation"])


def test_integer_operators_reach_both_end_values():
    lower, upper = np.array([0.0]), np.array([3.0])
    rng = np.random.default_rng(3)
    mutated = integer_polynomial_mutation(np.full((4000, 1), 1.0), lower, upper, rng, eta=1.0, variable_probability=1.0)
    assert set(np.unique(mutated).tolist()) == {0.0, 1.0, 2.0, 3.0}
    child_a, child_b = integer_sbx(np.zeros((4000, 1)), np.full((4000, 1), 3.0), lower, upper, rng, eta=1.0,
                                   probability=1.0)
    assert set(np.unique(np.concatenate([child_a, child_b])).tolist()) == {0.0, 1.0, 2.0, 3.0}


def test_uniform_and_one_point_take_each_variable_from_a_parent():
    a, b = np.zeros((200, 10)), np.ones((200, 10))
    rng = np.random.default_rng(4)
    child_a, child_b = uniform_crossover(a, b, rng, probability=1.0)
    np.testing.assert_array_equal(child_a + child_b, 1.0)  # each variable went to exactly one child
    assert 0.4 < child_a.mean() < 0.6
    child_a, child_b = one_point_crossover(a, b, rng, probability=1.0)
    np.testing.assert_array_equal(child_a + child_b, 1.0)
    # one cut: a child is a head of a's values then a tail of b's, never switching back
    assert (np.diff(child_a, axis=1) >= 0).all() and (child_a[:, 0] == 0).all() and (child_a[:, -1] == 1).all()
    unchanged_a, _ = one_point_crossover(a, b, rng, probability=0.0)
    np.testing.assert_array_equal(unchanged_a, a)


def test_bit_flip_flips_about_one_bit_in_d():
    bits = np.zeros((2000, 20))
    flipped = bit_flip_mutation(bits, np.random.default_rng(5))
    assert set(np.unique(flipped).tolist()) <= {0.0, 1.0}
    assert flipped.sum(axis=1).mean() == pytest.approx(1.0, abs=0.1)
    np.testing.assert_array_equal(bit_flip_mutation(bits, np.random.default_rng(5), variable_probability=1.0), 1.0)


def test_order_crossover_matches_the_textbook_example():
    """Davis's OX with cuts after positions 3 and 7: p1 = 123|4567|89, p2 = 452|1876|93 -> 218|4567|93."""
    from lamarckian_hpc.ec.operators.order_crossover import _order_child

    p1 = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9], float) - 1
    p2 = np.array([4, 5, 2, 1, 8, 7, 6, 9, 3], float) - 1
    np.testing.assert_array_equal(_order_child(p1, p2, 3, 7) + 1, [2, 1, 8, 4, 5, 6, 7, 9, 3])
    np.testing.assert_array_equal(_order_child(p2, p1, 3, 7) + 1, [3, 4, 5, 1, 8, 7, 6, 9, 2])
    # through the public function, with random cuts: most crossed children differ from both parents
    child_a, _ = order_crossover(np.tile(p1, (200, 1)), np.tile(p2, (200, 1)), np.random.default_rng(6), probability=1.0)
    assert ((child_a != p1).any(axis=1) & (child_a != p2).any(axis=1)).mean() > 0.5


def test_swap_and_inversion_move_the_expected_elements():
    genomes = np.tile(np.arange(10.0), (500, 1))
    swapped = swap_mutation(genomes, np.random.default_rng(7))
    moved = (swapped != genomes).sum(axis=1)
    assert set(moved.tolist()) <= {0, 2} and (moved == 2).mean() > 0.8  # a swap of two positions (or of one with itself)
    inverted = inversion_mutation(genomes, np.random.default_rng(8))
    for row in inverted[:100]:
        changed = np.flatnonzero(row != np.arange(10))
        if len(changed):  # one reversed slice: the changed span reads backwards
            span = row[changed[0]: changed[-1] + 1]
            np.testing.assert_array_equal(span, np.arange(changed[0], changed[-1] + 1)[::-1])


def test_tournament_prefers_lower_fitness():
    fitness = np.arange(100.0)
    rng = np.random.default_rng(9)
    binary = tournament(fitness, 20000, rng, size=2)
    assert binary.mean() == pytest.approx(33.0, abs=1.0)  # the minimum of two uniform draws: (n-1)/3 roughly
    assert tournament(fitness, 20000, rng, size=8).mean() < 15
    np.testing.assert_array_equal(tournament(np.array([3.0, 1.0, 2.0]), 50, rng, size=200), 1)


def test_crowded_tournament_never_picks_the_worse_of_a_pair():
    F = np.array([[1.0, 4.0], [2.0, 2.0], [4.0, 1.0], [3.0, 3.0], [5.0, 5.0]])
    rank, crowding = rank_and_crowding(F)  # fronts {0, 1, 2}, {3}, {4}; 0 and 2 are boundary points
    winners = crowded_tournament(rank, crowding, 5000, np.random.default_rng(10))
    a, b = np.random.default_rng(10).integers(0, 5, size=(2, 5000))  # the pairs it drew
    badness = rank * 10.0 - np.minimum(crowding, 5.0)
    np.testing.assert_array_equal(badness[winners], np.minimum(badness[a], badness[b]))
    counts = np.bincount(winners, minlength=5)
    assert counts[0] + counts[2] > counts[1] > counts[3] > counts[4] > 0  # 4 wins only against itself


def test_repair_bounds_and_rounds_but_leaves_permutations_alone():
    genomes = np.array([[-7.4, 0.6, 12.0, 0.0, 50.5, 1.2]])
    np.testing.assert_array_equal(CODINGS["integer"].repair(genomes), [[-3.0, 1.0, 9.0, 0.0, 50.0, 1.0]])
    np.testing.assert_array_equal(CODINGS["real"].repair(genomes), [[-5.0, 0.6, 1e-2, -0.5, 2.5, 1.2]])
    assert CODINGS["integer"].valid(CODINGS["integer"].repair(genomes)).all()
    tour = CODINGS["permutation"].sample(np.random.default_rng(11), 1)
    np.testing.assert_array_equal(CODINGS["permutation"].repair(tour), tour)
