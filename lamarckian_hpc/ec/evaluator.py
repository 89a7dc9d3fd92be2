"""The Evaluator interface: what an EC algorithm evaluates, whether a numeric test problem or an
RL learner. Algorithms never call it themselves (they are ask/tell); the evolution driver in
`runtime/` does, serially or on Ray workers, so an implementation must be picklable and must
not rely on state shared between calls.

An implementation has three methods:

- ``describe()`` says what it evaluates: a name, the genome's coding (kind and per-variable
  bounds, see `ec.coding`) and the number of objectives.
- ``initialize(rng, count)`` gives `count` initial genomes, [count, length] floats. A numeric
  problem samples its coding uniformly; an RL learner returns its initial network weights (real
  coding) or its starting hyperparameters (real coding, log10 for scale-free ones).
- ``evaluate(genomes)`` maps genomes [n, length] to objectives [n, num_objectives], all
  minimised (an RL learner returns negated returns). It may be called with one row at a time.

Anything with these three methods is an Evaluator; no base class is needed.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from .coding import Coding


@dataclass(frozen=True)
class Description:
    """What an Evaluator evaluates: its genomes' coding and how many objectives it returns."""

    name: str
    coding: Coding
    num_objectives: int

    @property
    def genome_length(self) -> int:
        return self.coding.length


@runtime_checkable
class Evaluator(Protocol):
    def describe(self) -> Description:
        """Coding of the genomes and number of objectives."""
        ...

    def initialize(self, rng: np.random.Generator, count: int) -> np.ndarray:
        """`count` initial genomes, [count, length]."""
        ...

    def evaluate(self, genomes: np.ndarray) -> np.ndarray:
        """Objectives [n, num_objectives] of genomes [n, length], minimised."""
        ...


def evaluate_one(evaluator: Evaluator, genome: np.ndarray,
                 delay_seconds: float = 0.0) -> tuple[np.ndarray, float, int, str]:
    """Objectives of one genome [length], its evaluation wall time, the evaluating process's id and
    its host: what the evolution driver runs per individual, here or as a Ray task (it lives here,
    not in `runtime/`, so that a worker imports only this package to run it)."""
    start = time.perf_counter()
    if delay_seconds:
        time.sleep(delay_seconds)
    objectives = np.asarray(evaluator.evaluate(genome[None, :]), float)[0]
    return objectives, time.perf_counter() - start, os.getpid(), socket.gethostname()
