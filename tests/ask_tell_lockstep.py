"""Two ask/tell algorithms, one saved and one loaded from its state, go on in lockstep: the same
genomes asked, the same objectives told, the same ids and parents recorded."""

from __future__ import annotations

from typing import Any

import numpy as np


def assert_lockstep(original: Any, loaded: Any, problem: Any, generations: int) -> None:
    for _ in range(generations):
        expected, continued = original.ask(), loaded.ask()
        np.testing.assert_array_equal(continued, expected)
        objectives = problem.evaluate(expected)
        original.tell(expected, objectives)
        loaded.tell(continued, objectives)
        np.testing.assert_array_equal(loaded.told_ids, original.told_ids)
        np.testing.assert_array_equal(loaded.told_parent_ids, original.told_parent_ids)
