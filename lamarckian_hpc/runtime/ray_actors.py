"""Actor processes on Ray: Ray places, starts and restarts them; ZeroMQ carries their data.

Each Ray actor runs an `ActorLoop` in a thread started by its constructor, so a restart (Ray runs
the constructor again in a new process) resumes sampling with no call from the learner. A loop
that fails ends its process, and Ray restarts it.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import ray

from ..config import RunConfig
from .actor import ActorLoop

log = logging.getLogger(__name__)

#: Sampling processes use one thread each: on a shared node, more only fight over cores.
SINGLE_THREAD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


class ActorProcess:
    def __init__(self, config_tree: dict[str, Any], actor_index: int, num_actors: int, weights_address: str,
                 experience_address: str) -> None:
        config = RunConfig.model_validate(config_tree)
        self.loop = ActorLoop(config, actor_index, num_actors, weights_address, experience_address)
        self.thread = threading.Thread(target=self._run, name=f"actor-{actor_index}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.loop.run()
        except BaseException:
            log.exception("actor loop failed; ending the process so that Ray restarts it")
            os._exit(1)

    def pid(self) -> int:
        return os.getpid()

    def stop(self) -> None:
        self.loop.stop_event.set()
        self.thread.join(timeout=10)


def start_actors(config: RunConfig, num_actors: int, weights_address: str, experience_address: str) -> list[Any]:
    remote = ray.remote(ActorProcess).options(
        num_cpus=min(1.0, ray.cluster_resources().get("CPU", 1.0) / num_actors),  # oversubscribe if asked to
        max_restarts=-1,
        max_task_retries=0,
        runtime_env={"env_vars": SINGLE_THREAD_ENV},
    )
    tree = config.to_json_dict()
    return [remote.remote(tree, index, num_actors, weights_address, experience_address) for index in range(num_actors)]


def init_ray(config: RunConfig, num_cpus: int) -> bool:
    """Join `runtime.ray_address`, or start a local Ray with `num_cpus`; True when we started it."""
    if ray.is_initialized():
        return False
    common = {"include_dashboard": False, "logging_level": logging.WARNING, "log_to_driver": True}
    if config.runtime.ray_address is not None:
        ray.init(address=config.runtime.ray_address, **common)
        return False
    ray.init(num_cpus=num_cpus, object_store_memory=100 * 1024 * 1024, **common)
    return True
