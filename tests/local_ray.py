"""A local Ray for the tests of a module, started the way a run starts its own
(`runtime.placement.ray_setup.ensure_ray`): its session lives in a temp dir of its own, never the shared
/tmp/ray, so tests on other pytest-xdist workers (and their checks that a run leaves /tmp/ray
alone) do not see it. Trainers and population runtimes join it instead of starting their own."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lamarckian_hpc.runtime.placement.ray_setup import ensure_ray, shutdown_ray


@contextmanager
def local_ray(num_cpus: int = 2) -> Iterator[None]:
    started = ensure_ray(None, num_cpus)
    assert started, "a Ray was already up in this test process"
    try:
        yield
    finally:
        shutdown_ray()


def joining_node(folder: Any, tmp_path: Path, leave: threading.Event, leave_seconds: float) -> tuple[threading.Thread, dict]:
    """A second real Ray node of this machine that joins the local Ray through the run's join
    `folder`, as an actor job's node does (`cluster.actor_job.join_run`), in a thread not yet
    started; it leaves when `leave` is set. Publishes the local Ray's contact in the folder. The
    thread, and the dict that gets the node's outcome (its label, how it ended)."""
    import ray

    from lamarckian_hpc.cluster.actor_job import ActorJobSpec, join_run
    from lamarckian_hpc.storage.join_folder import RunContact

    folder.publish(RunContact(ray.get_runtime_context().gcs_address, os.environ["RAY_AUTH_TOKEN"], "g1", "",
                              str(tmp_path / "run.h5"), time.time()))
    outcome: dict = {}
    spec = ActorJobSpec(str(folder.path), str(tmp_path / "logs"), reconnect_seconds=60, leave_seconds=leave_seconds)
    return threading.Thread(target=lambda: outcome.update(join_run(spec, leave))), outcome
