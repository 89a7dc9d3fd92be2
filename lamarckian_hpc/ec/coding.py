"""Codings: how a genome's numbers are to be read, so that initialization, variation and repair
keep every genome valid. A genome is always one row of floats (HDF5 stores it as float64), and
the coding says which rows are legal:

- ``real``: each variable in [lower, upper]. Neural-network weights are a real coding (wide or
  infinite bounds), and so are hyperparameters; a scale-free hyperparameter such as a learning
  rate is coded by its log10 within log-scaled bounds and exponentiated by the evaluator.
- ``integer``: whole numbers in [lower, upper].
- ``permutation``: an ordering of 0 .. length-1 (a tour, a schedule).
- ``binary``: 0 or 1 per variable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

CodingKind = Literal["real", "integer", "permutation", "binary"]
CODING_KINDS: tuple[str, ...] = ("real", "integer", "permutation", "binary")


@dataclass(frozen=True)
class Coding:
    kind: CodingKind
    lower: np.ndarray  # [length]
    upper: np.ndarray  # [length]

    def __post_init__(self) -> None:
        if self.kind not in CODING_KINDS:
            raise ValueError(f"coding kind must be one of {', '.join(CODING_KINDS)}, got {self.kind!r}")
        if np.shape(self.lower) != np.shape(self.upper) or np.ndim(self.lower) != 1:
            raise ValueError("coding bounds must be two 1-D arrays of one length")
        if (np.asarray(self.lower) > np.asarray(self.upper)).any():
            raise ValueError("coding lower bounds must not exceed upper bounds")

    @classmethod
    def real(cls, lower: np.ndarray, upper: np.ndarray) -> Coding:
        return cls("real", np.asarray(lower, float), np.asarray(upper, float))

    @classmethod
    def integer(cls, lower: np.ndarray, upper: np.ndarray) -> Coding:
        return cls("integer", np.round(np.asarray(lower, float)), np.round(np.asarray(upper, float)))

    @classmethod
    def permutation(cls, length: int) -> Coding:
        return cls("permutation", np.zeros(length), np.full(length, float(length - 1)))

    @classmethod
    def binary(cls, length: int) -> Coding:
        return cls("binary", np.zeros(length), np.ones(length))

    @property
    def length(self) -> int:
        return len(self.lower)

    def sample(self, rng: np.random.Generator, count: int) -> np.ndarray:
        """`count` genomes drawn uniformly from the coding's valid set, [count, length] floats."""
        if self.kind == "real":
            return self.lower + rng.random((count, self.length)) * (self.upper - self.lower)
        if self.kind == "integer":
            return rng.integers(self.lower.astype(np.int64), self.upper.astype(np.int64) + 1,
                                size=(count, self.length)).astype(float)
        if self.kind == "binary":
            return rng.integers(0, 2, size=(count, self.length)).astype(float)
        return np.argsort(rng.random((count, self.length)), axis=1).astype(float)

    def valid(self, genomes: np.ndarray) -> np.ndarray:
        """Per row, whether the genome is legal under this coding, [n] bools."""
        genomes = np.asarray(genomes, float)
        if genomes.ndim != 2 or genomes.shape[1] != self.length:
            return np.zeros(len(genomes), dtype=bool)
        finite = np.isfinite(genomes).all(axis=1)
        within = ((genomes >= self.lower) & (genomes <= self.upper)).all(axis=1)
        if self.kind == "real":
            return finite & within
        whole = (genomes == np.round(genomes)).all(axis=1)
        if self.kind in ("integer", "binary"):
            return finite & within & whole
        ordered = (np.sort(genomes, axis=1) == np.arange(self.length)).all(axis=1)
        return finite & whole & ordered

    def repair(self, genomes: np.ndarray) -> np.ndarray:
        """Bounded and (for integer and binary codings) rounded; permutations are returned as they are
        (their operators never break them)."""
        genomes = np.asarray(genomes, float)
        if self.kind == "permutation":
            return genomes.copy()
        clipped = np.clip(genomes, self.lower, self.upper)
        return clipped if self.kind == "real" else np.round(clipped)
