"""What every recorded episode in a run file must satisfy, for the tests that record some."""

from __future__ import annotations

import numpy as np
import pytest


def assert_episodes_consistent(run, policy_id: str = "main") -> dict[str, np.ndarray]:
    """Every recorded episode's rows agree with its index row; returns the index."""
    index = run.episodes(policy_id)
    assert len(index["episode"]) > 0
    assert len(set(index["episode"].tolist())) == len(index["episode"])  # each episode once
    np.testing.assert_array_equal(index["first_row"][1:], (index["first_row"] + index["length"])[:-1])
    for number, length, episode_return, first, last in zip(index["episode"], index["length"], index["return"],
                                                          index["policy_version_first"], index["policy_version_last"]):
        steps = run.episode(int(number), policy_id)
        assert len(steps["rewards"]) == length
        assert steps["rewards"].sum() == pytest.approx(episode_return, abs=1e-3)
        np.testing.assert_array_equal(steps["episode"], number)
        np.testing.assert_array_equal(steps["step"], np.arange(length))
        ends = steps["terminated"] | steps["truncated"]
        assert ends[-1] and not ends[:-1].any() and not (steps["terminated"] & steps["truncated"]).any()
        assert steps["policy_version"][0] == first and steps["policy_version"][-1] == last
        assert np.all(np.diff(steps["policy_version"]) >= 0)
    return index
