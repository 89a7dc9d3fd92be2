"""A local Ray for the tests of a module, started the way a run starts its own
(`runtime.placement.ray_setup.ensure_ray`): its session lives in a temp dir of its own, never the shared
/tmp/ray, so tests on other pytest-xdist workers (and their checks that a run leaves /tmp/ray
alone) do not see it. Trainers and population runtimes join it instead of starting their own."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from lamarckian_hpc.runtime.placement.ray_setup import ensure_ray, shutdown_ray


@contextmanager
def local_ray(num_cpus: int = 2) -> Iterator[None]:
    started = ensure_ray(None, num_cpus)
    assert started, "a Ray was already up in this test process"
    try:
        yield
    finally:
        shutdown_ray()
