"""Starting or joining Ray, the same way for every runtime (training, evolution, EvoRL).

A run without `runtime.ray_address` starts a Ray of its own (`address="local"`): a bare
`ray.init()` would join whatever cluster another run's `ray start` left on the machine, with its
CPUs and its owner. That Ray keeps its sessions in a temp dir of the run's own (not the shared
`/tmp/ray`, which other users' and other jobs' Rays write to) and uses token authentication with
a token made for the run, so Ray neither warns about authentication nor writes a token into the
user's home. A run with an address joins exactly that cluster, with the caller's settings.

The local Ray is lean: it runs only the processes a run on one machine uses. `ray.init` would
also start the autoscaler's monitor (about 48 MB; nothing autoscales a run's own Ray), the log
monitor (about 46 MB), which streams the workers' output to the driver's console, and the
dashboard's API server (about 55 MB, and 0.6 s of start-up spent waiting for it to publish its
address), which serves the job-submission and state APIs and `ray list`, none of which a run
uses. The run's actors report what matters (their environment failing, their progress) as
messages to the learner, and their own output stays in `worker-*.err` under the session folder
while the run lasts. The head node is therefore started here, with those three left out, and
`ray.init` connects to it. What stays: the GCS and the raylet, the dashboard agent and the
runtime-environment agent, which the raylet starts on every node and waits for (Ray 2.60 offers
no switch for them), and an object store sized for weights and small results.
"""

from __future__ import annotations

import importlib
import logging
import os
import secrets
import shutil
import tempfile
import threading
from collections.abc import Sequence
from typing import Any

#: The object store of a local Ray: weights and small results only, so a small store is plenty
#: and leaves the machine's memory to the actors.
LOCAL_OBJECT_STORE_BYTES = 100 * 1024 * 1024
#: Ray's workers on a node sample, evaluate or train one thing each: one BLAS/OpenMP thread
#: apiece, since more only fight over the node's cores.
SINGLE_THREAD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
#: Ray puts Unix sockets under its temp dir, at about 75 characters below it, and a socket path
#: may not exceed 107 bytes: a longer TMPDIR falls back to /tmp.
MAX_TEMP_ROOT_CHARS = 28

_local_temp_dir: str | None = None
_local_node: Any = None  # the head node `ensure_ray` started (ray._private.node.Node)
#: `start_ray_while_importing` started the local Ray and no `ensure_ray` has taken it over yet.
_started_ahead = False


def _use_run_token() -> None:
    """Token authentication with a fresh token, for this process and the Ray processes it starts
    (they inherit the environment). Ray reads RAY_AUTH_MODE into its config when it is imported,
    so the config is read again here; an explicit RAY_AUTH_MODE of the user's is left alone."""
    if "RAY_AUTH_MODE" in os.environ:
        return
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from ray._raylet import Config

    Config.initialize("")


def ensure_ray(address: str | None, num_cpus: int) -> bool:
    """Join `address`, or start a local Ray with `num_cpus`; True when this call started it (the
    caller then ends it with `shutdown_ray`). Does nothing when Ray is already up in this process,
    and then returns True only for a Ray that `start_ray_while_importing` started for this caller."""
    global _local_temp_dir, _started_ahead
    import ray

    if ray.is_initialized():
        taken_over, _started_ahead = _started_ahead, False
        return taken_over
    common = {"include_dashboard": False, "logging_level": logging.WARNING}
    if address:
        ray.init(address=address, **common)
        return False
    _use_run_token()
    root = tempfile.gettempdir()
    _local_temp_dir = tempfile.mkdtemp(prefix="lhr-", dir=root if len(root) <= MAX_TEMP_ROOT_CHARS else "/tmp")
    _start_lean_head(num_cpus)
    ray.init(address=_local_node.address, **common)
    return True


def worker_runtime_env() -> dict[str, Any]:
    """The runtime env a run's Ray actors ask for. On the run's own Ray none: its raylet gives every
    worker SINGLE_THREAD_ENV already, so the actors take the workers Ray starts ahead when the
    driver connects (with a runtime env of their own they could not, and those workers would
    start for nothing, about a second of CPU each while the learner starts). On a joined cluster,
    whose workers have that cluster's environment, the env vars, and this process's PYTHONPATH
    (which `lamarckian-hpc` extends with the folder it runs in), so that actors on every host import
    the modules the run names from the same folders: on a cluster, a shared file system's."""
    if _local_node is not None:
        return {}
    python_path = os.environ.get("PYTHONPATH")
    return {"env_vars": {**SINGLE_THREAD_ENV, **({"PYTHONPATH": python_path} if python_path else {})}}


def ray_cpus(num_actors: int | None) -> int:
    """The CPUs a run's Ray offers: the machine's, or one per actor where it asks for more."""
    cores = os.cpu_count() or 1
    return max(cores, num_actors or cores)


def start_ray_while_importing(address: str | None, num_cpus: int, modules: Sequence[str] = ("torch",)) -> None:
    """Start (or join) Ray as `ensure_ray` does, while a thread imports `modules`.

    A learner's process spends 1-1.5 s importing torch and 1.5-3.5 s starting Ray's head and
    connecting to it, mostly waiting for Ray's own processes to start; done together they save
    about half a second on two cores (more where Ray's processes have cores of their own). The Ray is the caller's as if `ensure_ray` had started it: the
    next `ensure_ray` (the trainer's) takes it over, and returns True when this call started it.
    An import that fails is left for the caller's own import to raise."""
    global _started_ahead

    def load() -> None:
        for module in modules:
            try:
                importlib.import_module(module)
            except Exception:  # noqa: BLE001 - raised again, where it can be reported, by the caller's import
                return

    loader = threading.Thread(target=load, name="import-ahead", daemon=True)
    loader.start()
    try:
        _started_ahead = ensure_ray(address, num_cpus)
    finally:
        loader.join()


def shutdown_unclaimed_ray() -> None:
    """End a Ray that `start_ray_while_importing` started and no trainer took over (its trainer
    failed to start)."""
    if _started_ahead:
        shutdown_ray()


def _start_lean_head(num_cpus: int) -> None:
    """A head node on this machine without the autoscaler's monitor, the log monitor and the API
    server (see the module's docstring); the rest as `ray.init(address="local")` would start it."""
    global _local_node
    from ray._private.node import Node
    from ray._private.parameter import RayParams

    class HeadWithoutApiServer(Node):
        def start_api_server(self, *, include_dashboard: bool | None, raise_on_failure: bool) -> None:
            """Not started: see the module's docstring."""

    params = RayParams(num_cpus=num_cpus, num_gpus=None, object_store_memory=LOCAL_OBJECT_STORE_BYTES,
                       temp_dir=_local_temp_dir, include_dashboard=False, no_monitor=True, include_log_monitor=False,
                       env_vars=SINGLE_THREAD_ENV)  # the raylet's, so every worker's (`worker_runtime_env`)
    _local_node = HeadWithoutApiServer(params, head=True, shutdown_at_exit=False, spawn_reaper=True)


def reachable_host(started_local_ray: bool, nodes_may_join: bool = False) -> str:
    """The address to bind what processes on other hosts connect to: this node's address in the
    Ray cluster, which every other node reaches (Ray itself talks to it there); loopback when no
    other host can take part, because the run's Ray is its own or every node of the joined cluster
    is on this host and none may join later (loopback is the fast path there). Never 0.0.0.0, which
    would listen on every interface of a shared node."""
    if started_local_ray:
        return "127.0.0.1"
    import ray

    here = ray.util.get_node_ip_address()
    addresses = {node.get("NodeManagerAddress") for node in ray.nodes() if node.get("Alive")}
    return "127.0.0.1" if addresses <= {here} and not nodes_may_join else here


def shutdown_ray() -> None:
    """Shut Ray down in this process and remove the temp dir of a local Ray that `ensure_ray` started."""
    global _local_temp_dir
    import ray

    global _local_node, _started_ahead
    _started_ahead = False
    ray.shutdown()
    if _local_node is not None:
        _local_node.kill_all_processes(check_alive=False, allow_graceful=True, wait=True)
        _local_node = None
    if _local_temp_dir is not None:
        shutil.rmtree(_local_temp_dir, ignore_errors=True)
        _local_temp_dir = None


#: How long the control path waits for an actor it started to answer (a relay's addresses, a
#: learner rank's node): Ray may first have to start a worker process and import torch.
ANSWER_SECONDS = 180.0


def answers(refs: Sequence[Any], what: str, seconds: float = ANSWER_SECONDS) -> list[Any]:
    """`ray.get(refs)` bounded in time: a node that never starts what it was given, or is lost,
    stops the run with one line naming what did not answer instead of a wait without end."""
    import ray

    try:
        return ray.get(list(refs), timeout=seconds)
    except ray.exceptions.GetTimeoutError:
        raise TimeoutError(f"{what} did not answer within {seconds:g} s "
                           "(no free CPU on a node, or a node lost?)") from None
