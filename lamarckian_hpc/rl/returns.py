"""Return and advantage estimators as plain functions of arrays.

Steps of many agents are laid end to end in one flat sequence; `segment_ends[t]` marks the last
step of each agent's fragment, so nothing flows from one fragment into the next. Bootstrapping is
folded into `next_values`: the value of the following state, 0 after a terminal step, the
critic's estimate after a truncation or a cut.
"""

from __future__ import annotations

import numpy as np


def generalized_advantages(
    rewards: np.ndarray,
    values: np.ndarray,
    next_values: np.ndarray,
    segment_ends: np.ndarray,
    gamma: float,
    gae_lambda: float,
) -> np.ndarray:
    """GAE (Schulman et al. 2016) over a flat sequence of fragments; all inputs are [T].

    delta_t = r_t + gamma * next_value_t - value_t
    A_t     = delta_t + gamma * lambda * (1 - segment_end_t) * A_{t+1}
    """
    deltas = rewards + gamma * next_values - values
    carry = gamma * gae_lambda * (1.0 - segment_ends.astype(np.float64))
    return reverse_fragment_scan(deltas, carry, segment_ends).astype(np.float32)


def reverse_fragment_scan(terms: np.ndarray, factors: np.ndarray, segment_ends: np.ndarray) -> np.ndarray:
    """x_t = terms_t + factors_t * x_{t+1} inside each fragment, x = 0 after a fragment's last step; float64 [T].

    A Python loop over every step costs a batch's whole length in interpreter time, so the steps are
    regrouped time-major, fragments side by side, and a loop runs over rows, each row one numpy
    operation over all the fragments (see `_scan_fragments`). A sequence whose last step is not
    marked ends its last fragment there, as the step-by-step loop did.
    """
    count = len(terms)
    if count == 0:
        return np.zeros(0, dtype=np.float64)
    last_steps = np.flatnonzero(segment_ends)
    if len(last_steps) == 0 or last_steps[-1] != count - 1:
        last_steps = np.append(last_steps, count - 1)
    lengths = np.diff(last_steps, prepend=-1)
    return _scan_fragments(np.asarray(terms, dtype=np.float64), np.asarray(factors, dtype=np.float64), lengths)


# Fragments up to this long are scanned row by row; longer ones are cut into blocks first.
_LONGEST_SCANNED_DIRECTLY = 16


def _scan_fragments(terms: np.ndarray, factors: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The scan of `reverse_fragment_scan` over fragments of `lengths`, laid end to end.

    Rows cost a numpy call each, however few fragments share them, so a few long fragments (one
    environment's 4096 steps) would leave the loop almost as long as the step-by-step one. Those are
    cut into blocks of about sqrt(L) steps: every block is scanned on its own, all side by side,
    with the product of its factors, and the blocks' values at their first steps then chain through
    a scan of the same form over blocks, so about 2 sqrt(L) rows cover a fragment of L steps. A
    fragment's last block gets exactly the step-by-step arithmetic; the earlier ones add the next
    block's value in one more product and sum, a rounding difference of a few float64 ulps.
    """
    longest = int(lengths.max())
    if longest <= _LONGEST_SCANNED_DIRECTLY:
        return _scan_rows(terms, factors, lengths, with_products=False)[0]
    block = int(np.ceil(np.sqrt(longest)))
    blocks_per_fragment = -(-lengths // block)
    last_blocks = np.cumsum(blocks_per_fragment) - 1
    block_lengths = np.full(int(last_blocks[-1]) + 1, block)
    block_lengths[last_blocks] = lengths - (blocks_per_fragment - 1) * block
    local, products = _scan_rows(terms, factors, block_lengths, with_products=True)
    first_steps = np.cumsum(block_lengths) - block_lengths
    block_values = _scan_fragments(local[first_steps], products[first_steps], blocks_per_fragment)
    following = np.append(block_values[1:], 0.0)  # the next block's value; unused after a last block
    chained = np.ones(len(block_lengths), dtype=bool)
    chained[last_blocks] = False
    steps = np.repeat(chained, block_lengths)
    result = local
    result[steps] += products[steps] * np.repeat(following[chained], block_lengths[chained])
    return result


def _scan_rows(
    terms: np.ndarray, factors: np.ndarray, lengths: np.ndarray, with_products: bool
) -> tuple[np.ndarray, np.ndarray | None]:
    """The step-by-step scan, one row (step r of every fragment) per numpy operation; float64 [T].

    Each fragment's arithmetic is the loop's, in the same order, so the values are the loop's
    exactly. Fragments are sorted longest first, so those still running at a step are a prefix of
    its row and the rows pack into T cells with no padding: fragments of very different lengths
    cost no memory beyond T. With `with_products`, also the product of the factors from each step
    to its fragment's end.
    """
    count, fragments, longest = len(terms), len(lengths), int(lengths.max())
    if longest * fragments == count:  # all fragments equally long: a transpose
        order = np.arange(count).reshape(fragments, longest).T.ravel()
        running_per_step = np.full(longest, fragments)
    else:
        by_length = np.argsort(-lengths, kind="stable")
        rank = np.empty(fragments, dtype=np.int64)
        rank[by_length] = np.arange(fragments)
        # running_per_step[r]: how many fragments have a step r; row r holds them in rank order.
        running_per_step = np.bincount(lengths - 1, minlength=longest)[::-1].cumsum()[::-1]
        row_starts = np.concatenate(([0], np.cumsum(running_per_step)[:-1]))
        step_in_fragment = np.arange(count) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        packed_position = row_starts[step_in_fragment] + np.repeat(rank, lengths)
        order = np.empty(count, dtype=np.int64)
        order[packed_position] = np.arange(count)
    packed_terms, packed_factors = terms[order], factors[order]
    packed = np.empty(count, dtype=np.float64)
    running = np.zeros(fragments, dtype=np.float64)
    packed_products = np.empty(count, dtype=np.float64) if with_products else None
    running_products = np.ones(fragments, dtype=np.float64)
    end = count
    for step in range(longest - 1, -1, -1):
        width = int(running_per_step[step])
        row = slice(end - width, end)
        running[:width] = packed_terms[row] + packed_factors[row] * running[:width]
        packed[row] = running[:width]
        if packed_products is not None:
            running_products[:width] *= packed_factors[row]
            packed_products[row] = running_products[:width]
        end -= width
    result = np.empty(count, dtype=np.float64)
    result[order] = packed
    if packed_products is None:
        return result, None
    products = np.empty(count, dtype=np.float64)
    products[order] = packed_products
    return result, products


def next_values_of_fragments(
    values: np.ndarray, lengths: np.ndarray, bootstrap_values: np.ndarray, terminated: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Shift `values` [T] by one step inside each fragment and close each fragment with its bootstrap.

    lengths, bootstrap_values and terminated are [num_fragments]. Returns (next_values, segment_ends), both [T].
    """
    next_values = np.empty_like(values)
    next_values[:-1] = values[1:]
    ends = np.cumsum(lengths) - 1
    next_values[ends] = np.where(terminated, 0.0, bootstrap_values)
    segment_ends = np.zeros(len(values), dtype=bool)
    segment_ends[ends] = True
    return next_values, segment_ends
