"""Noticing a run that cannot make progress, instead of waiting for ever.

An actor that cannot reach the learner (an address it cannot route to, a firewall, no free CPU
for Ray to start it on) never says hello, and ZeroMQ retries its connection silently; a run whose
actors all went quiet receives nothing. Both end the run with one line that names who is missing,
where they run and what they were given (`RunStalledError`), after `runtime.connect_timeout_seconds`
and `runtime.stall_timeout_seconds`.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence


class RunStalledError(RuntimeError):
    """The run cannot make progress; the message is one line for the user."""


class ActorWatch:
    """Which actors said hello (and from which host), and when experience last arrived."""

    def __init__(self, num_actors: int, connect_timeout_seconds: float, stall_timeout_seconds: float,
                 describe: Callable[[Sequence[int]], str], expected: Sequence[int] | None = None) -> None:
        """`expected`: the actors that report to this learner process (a learner rank's shard); default all."""
        self.expected = tuple(range(num_actors) if expected is None else expected)
        self.num_actors = len(self.expected)
        self.connect_timeout_seconds = connect_timeout_seconds
        self.stall_timeout_seconds = stall_timeout_seconds
        self.describe = describe  # actor indices -> where they run and the addresses they were given
        self.started = time.monotonic()
        self.hosts: dict[int, str] = {}
        self.all_connected_at: float | None = None
        self.last_experience_at: float | None = None
        self.failing: dict[int, str] = {}  # actors whose environment keeps raising -> the error

    def on_hello(self, actor_index: int, host: str) -> None:
        self.hosts[actor_index] = host
        self.failing.pop(actor_index, None)  # a new process samples afresh
        if self.all_connected_at is None and len(self.missing()) == 0:
            self.all_connected_at = time.monotonic()

    def forget(self, actor_index: int) -> None:
        """The actor is gone with its node, which left the run: it no longer counts as connected."""
        self.hosts.pop(actor_index, None)
        self.failing.pop(actor_index, None)

    def on_experience(self) -> None:
        """Experience that can be trained on arrived (not just a message)."""
        self.last_experience_at = time.monotonic()

    def on_env_failing(self, actor_index: int, error: str) -> None:
        self.failing[actor_index] = error

    def missing(self) -> list[int]:
        return [index for index in self.expected if index not in self.hosts]

    def per_host(self) -> dict[str, int]:
        """Connected actors per host, for the run file."""
        return dict(sorted(Counter(self.hosts.values()).items()))

    def check(self, now: float | None = None) -> None:
        """Raise RunStalledError when a timeout has passed."""
        now = time.monotonic() if now is None else now
        if self.num_actors and len(self.failing) == self.num_actors:
            index, error = min(self.failing.items())
            raise RunStalledError(f"no actor can sample: on all {self.num_actors} actors {error} "
                                  f"(actor {index} on {self.hosts.get(index, 'its host')})")
        missing = self.missing()
        waited = now - self.started
        if missing and waited > self.connect_timeout_seconds:
            raise RunStalledError(
                f"{len(missing)} of {self.num_actors} actors never connected within {waited:.0f} s "
                f"(runtime.connect_timeout_seconds={self.connect_timeout_seconds:g}): {self.describe(missing)}")
        quiet_since = self.last_experience_at or self.all_connected_at
        if quiet_since is not None and now - quiet_since > self.stall_timeout_seconds:
            hosts = ", ".join(f"{host} ({count})" for host, count in self.per_host().items())
            raise RunStalledError(
                f"no experience arrived for {now - quiet_since:.0f} s (runtime.stall_timeout_seconds="
                f"{self.stall_timeout_seconds:g}) from {len(self.hosts)} connected actors on {hosts or 'no host'}")
