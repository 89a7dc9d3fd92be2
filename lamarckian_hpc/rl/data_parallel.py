"""Data-parallel learning: N learner ranks with B/N steps each make the update of one learner with B.

A policy's learner may run as several processes (ranks), each fed by its own part of the actors.
What makes their updates one update is only arithmetic, and it lives here, as pure torch on an
abstract `GradientReducer` (the `torch.distributed` group that implements it is in
`runtime.learner.group`; nothing here imports Ray, ZeroMQ or torch.distributed):

- the ranks first agree on what they hold (`agree_on_shard`): the global batch is the ranks' shards
  laid end to end in rank order, B steps in all, and each rank knows where its own shard sits;
- every rank draws the same permutation of range(B) from its generator (all seeded alike), cuts it
  into the same global minibatches, and keeps the rows of each that fall in its own shard, so a
  minibatch may have few, or no, rows on a rank;
- losses are sums over a rank's rows divided by the global minibatch size (`GlobalMinibatch.mean`),
  so the gradients summed over ranks are those of the one-learner mean; advantage normalization
  takes the global minibatch mean and unbiased standard deviation (torch.std's), reduced for every
  minibatch of every epoch in one collective at the start of the update;
- `rl.optim.GuardedSteps` sums the gradients over ranks (one coalesced buffer per step) between the
  backward pass and the clipping, and decides a non-finite skip from the summed values, so every
  rank takes the same steps; the diagnostics and the staleness metrics are reduced once per update.

Every rank runs every collective, in the same order, whatever it holds: a rank with no rows in a
minibatch (or an empty shard) contributes zeros, never skips, since a skipped collective is a
deadlock. With one rank (`SINGLE_PROCESS`, the default everywhere) no collective runs and the
update is, bit for bit, the single learner's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from ..mdp import ExperienceBatch
from ..mdp.staleness import STALENESS_BINS, STALENESS_METRICS, staleness_metrics


@runtime_checkable
class GradientReducer(Protocol):
    """The collectives the learner ranks of one policy run together. Every rank calls the same
    methods in the same order with tensors of the same shapes; a call returns on a rank once every
    rank has made it (or raises, on a timeout or a lost rank)."""

    rank: int
    world_size: int

    def all_gather_counts(self, count: int) -> list[int]:
        """Every rank's `count`, in rank order."""
        ...

    def all_reduce_sum_(self, tensors: Sequence[Tensor]) -> None:
        """Replace each tensor, in place, by its sum over the ranks (implementations send them as
        one flat buffer per call)."""
        ...


class SingleProcess:
    """The group of one learner: nothing to agree with, nothing to sum."""

    rank = 0
    world_size = 1

    def all_gather_counts(self, count: int) -> list[int]:
        return [count]

    def all_reduce_sum_(self, tensors: Sequence[Tensor]) -> None:
        return None


#: The reducer of every learner that is not told otherwise.
SINGLE_PROCESS = SingleProcess()


class RanksDisagree(RuntimeError):
    """The ranks' collectives ran, but their inputs show they are not making the same update (a
    different seed, random state or configuration on some rank)."""


@dataclass(frozen=True)
class Shard:
    """Where one rank's steps sit in the global batch: the ranks' shards end to end, in rank order."""

    counts: tuple[int, ...]
    rank: int

    @property
    def total(self) -> int:
        return sum(self.counts)

    @property
    def offset(self) -> int:
        return sum(self.counts[: self.rank])

    @property
    def size(self) -> int:
        return self.counts[self.rank]

    def minibatch_indices(self, order: np.ndarray, minibatch_size: int, device: torch.device) -> list[Tensor]:
        """This rank's rows of each global minibatch of `order` (a permutation of range(total)), as
        indices into its shard; the last minibatch, if short, is dropped, as one learner drops it."""
        starts = range(0, self.total - minibatch_size + 1, minibatch_size)
        if len(self.counts) == 1:  # one learner: exactly its slices of the permutation
            order_t = torch.from_numpy(order).to(device)
            return [order_t[start : start + minibatch_size] for start in starts]
        mine = (order >= self.offset) & (order < self.offset + self.size)
        return [torch.from_numpy(order[start : start + minibatch_size][mine[start : start + minibatch_size]]
                                 - self.offset).to(device) for start in starts]


def agree_on_shard(reducer: GradientReducer, count: int) -> Shard:
    """What every rank holds (one collective), hence the global batch and this rank's place in it."""
    counts = tuple(reducer.all_gather_counts(int(count)))
    if len(counts) != reducer.world_size or counts[reducer.rank] != count:
        raise RanksDisagree(f"learner rank {reducer.rank}: gathered counts {counts} do not hold this rank's "
                            f"{count} at its place among {reducer.world_size} ranks")
    return Shard(counts, reducer.rank)


@dataclass(frozen=True)
class GlobalMinibatch:
    """What a rank needs to know of a global minibatch beyond its own rows: how many rows it has in
    all, and (when advantages are normalized) their global mean and standard deviation."""

    size: int
    advantage_mean: Tensor | None = None
    advantage_std: Tensor | None = None

    def mean(self, values: Tensor) -> Tensor:
        """This rank's share of the minibatch mean of `values`: summed over ranks, the mean."""
        return values.sum() / self.size

    def normalize(self, advantages: Tensor) -> Tensor:
        """`rl.ppo.normalize` with the global minibatch's statistics (identity below two rows)."""
        if self.advantage_mean is None or self.advantage_std is None:
            return advantages
        return (advantages - self.advantage_mean) / (self.advantage_std + 1e-8)


def global_minibatches(reducer: GradientReducer, minibatches: Sequence[Tensor], minibatch_size: int,
                       advantages: Tensor | None = None) -> list[GlobalMinibatch]:
    """The global facts of each of an update's minibatches (all epochs), in the order they are
    stepped. With `advantages`, one collective sums each minibatch's (count, sum, sum of squares)
    over the ranks, in float64; the counts, which every rank also knows, check that the ranks cut
    the same minibatches."""
    if advantages is None:
        return [GlobalMinibatch(minibatch_size) for _ in minibatches]
    moments = torch.zeros((len(minibatches), 3), dtype=torch.float64, device=advantages.device)
    for row, indices in enumerate(minibatches):
        values = advantages[indices].double()
        moments[row, 0] = values.numel()
        moments[row, 1] = values.sum()
        moments[row, 2] = values.square().sum()
    reducer.all_reduce_sum_([moments])
    counts, sums, squares = moments.unbind(1)
    if counts.numel() and not bool((counts == minibatch_size).all()):
        raise RanksDisagree(f"learner rank {reducer.rank}: the ranks' minibatches hold {counts.tolist()} rows in "
                            f"all, not {minibatch_size} each: they drew different permutations (a different "
                            "seed or random state on some rank)")
    means = sums / minibatch_size
    # The unbiased variance, as torch.std: (sum of squares - n mean^2) / (n - 1), in float64.
    stds = ((squares - sums * means) / max(minibatch_size - 1, 1)).clamp_min(0.0).sqrt()
    dtype = advantages.dtype
    if minibatch_size < 2:
        return [GlobalMinibatch(minibatch_size) for _ in minibatches]
    return [GlobalMinibatch(minibatch_size, mean.to(dtype), std.to(dtype)) for mean, std in zip(means, stds)]


def global_staleness_metrics(reducer: GradientReducer, staleness: np.ndarray) -> dict[str, float]:
    """`mdp.staleness.staleness_metrics` over every rank's steps (one sum and one gather); for no steps
    anywhere, a NaN mean, a max of -1 and an empty histogram."""
    if reducer.world_size == 1 and len(staleness):
        return staleness_metrics(staleness)
    counts = np.bincount(np.minimum(staleness, STALENESS_BINS), minlength=STALENESS_BINS + 1)
    totals = torch.tensor([float(staleness.sum()), float(len(staleness)), *counts.astype(np.float64)],
                          dtype=torch.float64)
    reducer.all_reduce_sum_([totals])
    largest = max(reducer.all_gather_counts(int(staleness.max()) if len(staleness) else -1))
    total, steps, *histogram = totals.tolist()
    metrics = {"staleness_mean": total / steps if steps else float("nan"), "staleness_max": float(largest)}
    metrics.update({name: float(count) for name, count in zip(STALENESS_METRICS, histogram)})
    return metrics


def empty_experience(observation_space: gym.Space, action_space: gym.Space) -> ExperienceBatch:
    """A batch of no steps, shaped for the spaces: what a rank that received nothing hands to
    `update`, so that it still takes part in every collective."""
    observation_dtype = np.uint8 if observation_space.dtype == np.uint8 else np.float32
    observations = np.zeros((0, *observation_space.shape), dtype=observation_dtype)
    if isinstance(action_space, gym.spaces.Discrete):
        actions = np.zeros(0, dtype=np.int64)
    else:
        actions = np.zeros((0, *action_space.shape), dtype=np.float32)
    return ExperienceBatch(observations=observations, actions=actions, log_probs=np.zeros(0, np.float32),
                           rewards=np.zeros(0, np.float32), policy_versions=np.zeros(0, np.int64),
                           lengths=np.zeros(0, np.int64), terminated=np.zeros(0, bool),
                           bootstrap_observations=observations.copy())
