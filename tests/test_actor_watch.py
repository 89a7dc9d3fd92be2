"""A run that cannot make progress ends with one line that names who is missing, where they run and
what they were given, instead of waiting for ever (the timing logic, on a given clock)."""

from __future__ import annotations

import pytest

from lamarckian_hpc.runtime.learner.actor_watch import ActorWatch, RunStalledError


def _watch(actors: int = 3) -> ActorWatch:
    watch = ActorWatch(actors, connect_timeout_seconds=10, stall_timeout_seconds=30,
                       describe=lambda indices: f"actors {list(indices)} given tcp://127.0.0.1:5000")
    watch.started = 100.0
    return watch


def test_actors_that_never_say_hello_end_the_run_after_the_connect_timeout():
    watch = _watch()
    watch.on_hello(0, "node1")
    watch.on_experience()  # the others' experience does not excuse the missing ones
    watch.check(now=109.0)
    with pytest.raises(RunStalledError) as raised:
        watch.check(now=111.0)
    message = str(raised.value)
    assert "2 of 3 actors never connected" in message
    assert "runtime.connect_timeout_seconds=10" in message
    assert "actors [1, 2] given tcp://127.0.0.1:5000" in message
    assert "\n" not in message


def test_silence_after_everyone_connected_ends_the_run_after_the_stall_timeout():
    watch = _watch(2)
    watch.on_hello(0, "node1")
    watch.on_hello(1, "node2")
    watch.last_experience_at = 200.0
    watch.check(now=229.0)
    with pytest.raises(RunStalledError, match=r"no experience arrived for 31 s .* on node1 \(1\), node2 \(1\)"):
        watch.check(now=231.0)


def test_connected_actors_are_counted_per_host_and_restarts_are_not_double_counted():
    watch = _watch(3)
    for index, host in ((0, "node1"), (1, "node2"), (2, "node2"), (1, "node2")):
        watch.on_hello(index, host)
    assert watch.per_host() == {"node1": 1, "node2": 2}
    assert watch.missing() == []
    watch.check(now=1e9 if watch.all_connected_at is None else watch.all_connected_at + 1)
