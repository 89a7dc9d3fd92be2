"""Pausing Python's cyclic garbage collector around bursts of short-lived objects.

A sampler with thousands of agents keeps thousands of controllers, slots and fragments alive, and
makes a few objects per agent per tick. The collector runs after every 700 net allocations and
now and then scans everything alive, so left running it scans the live controllers many times per
tick for no garbage. Paused over a tick (or over the learner taking a batch), it catches up once,
at the first allocation afterwards, over what the burst left alive; cyclic garbage is still
collected, one burst later at most.
"""

from __future__ import annotations

import gc
from types import TracebackType


class gc_paused:  # noqa: N801 (used like a function: `with gc_paused():`)
    """Context manager: the collector is off inside and back on after, errors included. Nested or
    under a caller that turned the collector off itself, it changes nothing. The switch is global
    and not coordinated between threads: a pause in one thread may end while another's goes on,
    which only lets the collector run earlier."""

    __slots__ = ("_resume",)

    def __enter__(self) -> None:
        self._resume = gc.isenabled()
        if self._resume:
            gc.disable()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self._resume:
            gc.enable()
