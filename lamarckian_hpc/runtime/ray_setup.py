"""Starting or joining Ray, the same way for every runtime (training, evolution, EvoRL).

A run without `runtime.ray_address` starts a Ray of its own (`address="local"`): a bare
`ray.init()` would join whatever cluster another run's `ray start` left on the machine, with its
CPUs and its owner. A run with an address joins exactly that cluster.
"""

from __future__ import annotations

import logging

#: The object store of a local Ray: weights and small results only, so a small store is plenty
#: and leaves the machine's memory to the actors.
LOCAL_OBJECT_STORE_BYTES = 100 * 1024 * 1024


def ensure_ray(address: str | None, num_cpus: int) -> bool:
    """Join `address`, or start a local Ray with `num_cpus`; True when this call started it (the
    caller then shuts it down). Does nothing when Ray is already up in this process."""
    import ray

    if ray.is_initialized():
        return False
    common = {"include_dashboard": False, "logging_level": logging.WARNING}
    if address:
        ray.init(address=address, **common)
        return False
    ray.init(address="local", num_cpus=num_cpus, object_store_memory=LOCAL_OBJECT_STORE_BYTES, **common)
    return True
