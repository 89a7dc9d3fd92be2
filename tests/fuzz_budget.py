"""How many generated cases each fuzz test tries: bounded for CI (seconds per test), and scaled up
by `LAMARCKIAN_HPC_FUZZ_SCALE` for the long run of `benchmarks/reliability/faults.py`, which counts them."""

from __future__ import annotations

import os

#: Multiplier of every fuzz test's number of examples, rounds and kills (1 in CI).
SCALE = max(1, int(os.environ.get("LAMARCKIAN_HPC_FUZZ_SCALE", "1")))


def examples(count: int) -> int:
    """`count` cases in CI, `count * SCALE` in a long run."""
    return count * SCALE
