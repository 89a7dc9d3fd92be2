"""A Ray cluster over the job's bootstrap tasks: rank 0 runs the head and the driver, every other
rank joins its node, and everything is torn down when the driver returns or fails.

Why each precaution: several jobs (and, on the test cluster, several simulated nodes) may share a
host, so every Ray port comes from discovery's per-node free ports, every node gets its own
`--temp-dir` under a per-job name, and the driver connects to an explicit address, never 'auto'
(which would find whichever cluster /tmp/ray points at). Each cluster gets its own random auth
token, passed in the environment, so a job cannot join another's cluster. `ray stop` is never used:
it kills every Ray process of the user on the host, other jobs' included. Each node is one
`ray start --block` process in its own session; SIGTERM makes it shut its node down, and the
session is killed outright if that takes too long.

Many nodes joining at once overload the head's GCS (and, where nodes share cores, the cores):
`ray start` gives a node 30 s to register, then fails with "The current node timed out during
startup". So the head comes up first and the other ranks join in waves, each once the one before
it is up: 1, 2, 4, ... nodes, doubling while a wave comes up quickly (up to `join_wave_max`), so a
large cluster of fast hosts joins in a few waves and many simulated nodes on a few shared cores
join a few at a time; a node whose `ray start` exits before its node is up is started again
(`join_attempts`); and every node runs with metrics collection off (less work for its agents).

Waiting ranks poll non-blocking MPI requests with a sleep: MPICH's blocking calls spin, which on
a shared node would take cores from the actors. They also stop once the head's Ray node has not
answered for a while: the release is broadcast through other ranks, and a lost node among them
would otherwise leave the ranks below it waiting for ever. A node that drops off the network and
comes back can leave MPI itself stuck in a call that these polls cannot bound (a test of the
release's request inside the fabric's TCP provider, or MPI_Finalize at exit): once its part is
done, each rank ends its process after a grace time whatever MPI does (`end_if_stuck`), killing its
Ray node on the way, so that the job ends and Slurm can requeue it. A rank below a lost node can be
stuck the same way in the wait for the release itself, where its own polls never run: a thread of
its own watches the head meanwhile and ends it the same way once the head is gone
(`end_once_head_gone`).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import msgpack
import numpy as np

from .discovery import ClusterLayout, NodeInfo, bcast_bytes, discover
from .ray_node import POLL_SECONDS, RayClusterError, RayNodeJoin, RaySettings, health_check_env, remove_earlier_attempts

__all__ = ["RayClusterError", "RayClusterInfo", "RaySettings", "run_on_ray_cluster", "ray_start_command"]

log = logging.getLogger(__name__)

T = TypeVar("T")

# The ports one Ray node listens on; every one is set per job (`port` is the GCS, head only).
RAY_PORT_OPTIONS = ("port", "node-manager-port", "object-manager-port", "metrics-export-port",
                    "dashboard-agent-listen-port", "dashboard-agent-grpc-port", "runtime-env-agent-port",
                    "dashboard-port")
NODE_RESOURCE_PREFIX = "node:"  # custom resource `node:<slurm node name>` on each Ray node
# A rank that waits for the head's release gives up once the head's GCS port has refused
# connections for this long: the head is gone, or one of the ranks that relay the release is (a
# lost node), and waiting longer would keep the job alive for nothing.
HEAD_GONE_SECONDS = 10.0
HEAD_CHECK_SECONDS = 2.0
FAILED_WAIT_SECONDS = 3.0
#: After a rank's part is done and its release and barrier waits are over, how long its process may
#: still take to exit (MPI_Finalize included) before `end_if_stuck` ends it.
EXIT_GRACE_SECONDS = 60.0


@dataclass(frozen=True)
class RayClusterInfo:
    """What the driver needs: where the head is and which Ray node is which Slurm node."""

    layout: ClusterLayout
    labels: tuple[str, ...]               # unique node names, in bootstrap-rank order
    head_address: str                     # ip:port of the GCS
    node_ids: dict[str, str]              # label -> Ray node id
    join_seconds: float = 0.0             # from the head's `ray start` to every node joined

    def to_dict(self) -> dict[str, Any]:
        return {"head_address": self.head_address, "labels": list(self.labels), "node_ids": self.node_ids,
                "join_seconds": self.join_seconds}


def ray_executable() -> str:
    """The `ray` command of the Python that runs this job, beside `sys.executable`: the caller's
    PATH may name another environment's Ray (another version, another user's), or none; on PATH
    only when this Python has none beside it."""
    beside = Path(sys.executable).with_name("ray")
    if beside.is_file():
        return str(beside)
    found = shutil.which("ray")
    if found is None:
        raise RayClusterError(f"no ray executable beside {sys.executable} nor on PATH: install ray in this environment")
    return found


def gpus_left_to_ray(gpus: int, visible: str | None) -> tuple[int, str]:
    """The head node's GPUs that Ray may hand out, as a count and a CUDA_VISIBLE_DEVICES list: all
    but the first visible one, on which the driver (learner rank 0, outside Ray's accounting) learns.
    Given every GPU, Ray would hand that one to a learner rank placed on the head, and two NCCL
    ranks on one device fail at their first all-reduce."""
    devices = ([device.strip() for device in visible.split(",") if device.strip() and device.strip() != "-1"]
               if visible is not None else [str(index) for index in range(gpus)])
    rest = devices[1:]
    return len(rest), ",".join(rest)


def ray_start_command(node: NodeInfo, label: str, head_address: str | None, temp_dir: str,
                      settings: RaySettings, resources: dict[str, float] | None = None,
                      num_gpus: int | None = None) -> list[str]:
    """`ray start --block` for one node; the head when `head_address` is None. The node offers
    `node:<label>`, `resources` and `num_gpus` GPUs (default every GPU of the node)."""
    ports = dict(zip(RAY_PORT_OPTIONS, node.free_ports))
    offered = json.dumps({f"{NODE_RESOURCE_PREFIX}{label}": 1, **(resources or {})})
    gpus = node.gpus if num_gpus is None else num_gpus
    command = [ray_executable(), "start", "--block", "--disable-usage-stats", f"--node-ip-address={node.address}",
               f"--temp-dir={temp_dir}", f"--num-cpus={node.cores}", f"--num-gpus={gpus}",
               f"--object-store-memory={settings.object_store_bytes}", f"--resources={offered}"]
    if head_address is None:
        command += ["--head", "--include-dashboard=false", "--no-monitor"]  # nothing autoscales an allocation
    else:
        command += [f"--address={head_address}"]
        ports.pop("port"), ports.pop("dashboard-port")
    command += [f"--{name}={port}" for name, port in ports.items()]
    return command


def end_if_stuck(seconds: float, exit_code: int, rank: int, node: RayNodeJoin | None = None,
                 keep_outcome: Callable[[], None] | None = None) -> threading.Timer:
    """End this process with `exit_code` unless it has exited within `seconds` (a daemon timer: it
    also runs while MPI_Finalize does, at exit), after `keep_outcome` (rank 0: the driver's result
    or error, which the process would have returned or raised) and after killing this rank's Ray
    `node`: a head left running would keep the ranks that watch it waiting. The run's files are
    closed by then."""
    def end() -> None:
        log.error("rank %d: MPI did not let this process end within %.0f s of its last wait (a node that "
                  "dropped off the network leaves MPI stuck); ending it with exit code %d", rank, seconds, exit_code)
        if keep_outcome is not None:
            try:
                keep_outcome()
            except Exception:  # noqa: BLE001 - the process must end all the same
                log.exception("rank %d: could not keep the driver's outcome", rank)
        if node is not None:
            node.kill()
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(exit_code)

    timer = threading.Timer(seconds, end)
    timer.daemon = True
    timer.start()
    return timer


def end_once_head_gone(head_gone: HeadGone, seconds: float, rank: int,
                       node: RayNodeJoin | None = None) -> threading.Thread:
    """Watch the head from a daemon thread while this rank waits for its release: once `head_gone`
    says so, `end_if_stuck` (exit code 0) after `seconds`. The wait's own polls see the same, unless
    MPI holds the wait inside a call they cannot bound, where only another thread still runs."""
    def watch() -> None:
        while not head_gone():
            time.sleep(HEAD_CHECK_SECONDS)
        end_if_stuck(seconds, 0, rank, node)

    thread = threading.Thread(target=watch, name="head-watch", daemon=True)
    thread.start()
    return thread


def wait_request(request: Any, timeout_seconds: float | None, give_up: Callable[[], bool] | None = None) -> bool:
    """Poll a non-blocking MPI request with sleeps (no spinning); False on timeout, or as soon as
    `give_up()` (asked every HEAD_CHECK_SECONDS) says so."""
    deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
    next_check = time.monotonic() + HEAD_CHECK_SECONDS
    while not request.Test():
        if deadline is not None and time.monotonic() > deadline:
            return False
        if give_up is not None and time.monotonic() >= next_check:
            if give_up():
                return False
            next_check = time.monotonic() + HEAD_CHECK_SECONDS
        time.sleep(POLL_SECONDS)
    return True


class HeadGone:
    """True once the head's GCS port has not accepted a connection for HEAD_GONE_SECONDS, or this
    rank's own node (asked first, so that it is started again meanwhile) failed every attempt."""

    def __init__(self, host: str, port: int, node: RayNodeJoin | None = None,
                 gone_seconds: float = HEAD_GONE_SECONDS) -> None:
        self.host, self.port = host, port
        self.node = node
        self.gone_seconds = gone_seconds
        self.failing_since: float | None = None

    def __call__(self) -> bool:
        if self.node is not None and not self.node.check() and not self.node.process.alive():
            log.error("this rank's Ray node failed to start %d times; see %s", self.node.attempts, self.node.log_path)
            return True
        try:
            with socket.create_connection((self.host, self.port), timeout=HEAD_CHECK_SECONDS):
                self.failing_since = None
                return False
        except OSError:
            self.failing_since = self.failing_since or time.monotonic()
            return time.monotonic() - self.failing_since >= self.gone_seconds


def _ray_env(token: str, settings: RaySettings) -> dict[str, str]:
    # No metrics collection: nothing here reads Ray's Prometheus metrics, and it is per-node work.
    return {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token, "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_enable_metrics_collection": "0", **health_check_env(settings.node_loss_seconds), **settings.extra_env}


def _wait_for_nodes(labels: tuple[str, ...], timeout_seconds: float, processes: RayNodeJoin) -> dict[str, str]:
    """Label -> Ray node id once every node has joined."""
    import ray

    started = time.monotonic()
    deadline = started + timeout_seconds
    reported = 0
    while True:
        found = {}
        for node in ray.nodes():
            for resource in node.get("Resources", {}):
                if node.get("Alive") and resource.startswith(NODE_RESOURCE_PREFIX):
                    name = resource[len(NODE_RESOURCE_PREFIX):]
                    if name in labels:
                        found[name] = node["NodeID"]
        if len(found) == len(labels):
            return found
        if time.monotonic() > deadline:
            missing = [label for label in labels if label not in found]
            raise RayClusterError(f"Ray nodes {missing} did not join within {timeout_seconds:.0f} s; "
                                  f"see their ray start logs in the job's output folder")
        if not processes.process.alive():
            raise RayClusterError(f"the Ray head exited:\n{processes.process.log_tail()}")
        if len(found) >= reported + 8:  # progress on large clusters, not a line per node
            reported = len(found)
            log.info("%d of %d Ray nodes joined after %.0f s", reported, len(labels), time.monotonic() - started)
        time.sleep(0.5)


def run_on_ray_cluster(driver: Callable[[RayClusterInfo], T], comm: Any = None,
                       settings: RaySettings | None = None, log_dir: str | None = None,
                       keep_outcome: Callable[[T | BaseException], None] | None = None) -> T | None:
    """Collective: start Ray over all ranks, run `driver` on rank 0 (the head), tear down.

    Returns the driver's result on rank 0 and None elsewhere; a driver exception propagates on
    rank 0 after the teardown. It is a job task's whole work: the process should end soon after
    it returns, and is ended (exit code 0, or 1 when the driver failed) after EXIT_GRACE_SECONDS
    if MPI holds it; rank 0 then hands the driver's result, or its exception, to `keep_outcome`
    first, since it will never return or raise it.
    """
    from mpi4py import MPI

    comm = MPI.COMM_WORLD if comm is None else comm
    settings = settings or RaySettings()
    rank = comm.Get_rank()
    layout = discover(comm, len(RAY_PORT_OPTIONS))
    secret = bcast_bytes(comm, msgpack.packb({"token": secrets.token_hex(32), "nonce": secrets.token_hex(3)})
                         if rank == 0 else None)
    shared = msgpack.unpackb(secret)
    env = _ray_env(shared["token"], settings)
    if rank == 0 and "ray._raylet" in sys.modules and os.environ.get("RAY_AUTH_MODE") != "token":
        raise RayClusterError("Ray was imported before the cluster started: import it inside the driver "
                              "(Ray reads RAY_AUTH_MODE once, when it is imported)")
    labels = layout.labels
    me = layout.nodes[rank]
    temp_root = settings.temp_root or tempfile.gettempdir()
    remove_earlier_attempts(temp_root, layout.job_id, rank)
    temp_dir = os.path.join(temp_root, f"lhr-{layout.job_id or 'local'}-{shared['nonce']}-{rank}")
    log_path = os.path.join(log_dir or temp_root, f"ray-{layout.job_id or 'local'}-{labels[rank]}.log")
    head = layout.head
    head_address = f"{head.address}:{head.free_ports[0]}"

    started = np.zeros(1, dtype=np.int8)
    process: RayNodeJoin | None = None
    if rank == 0:
        try:  # the head comes up whole (GCS and raylet) before anyone joins it
            bootstrap_started = time.monotonic()
            # The driver keeps the head's first GPU; Ray hands out the others.
            head_gpus, visible = gpus_left_to_ray(me.gpus, os.environ.get("CUDA_VISIBLE_DEVICES"))
            head_env = {**env, "CUDA_VISIBLE_DEVICES": visible} if me.gpus else env
            process = RayNodeJoin(ray_start_command(me, labels[0], None, temp_dir, settings, num_gpus=head_gpus),
                                  temp_dir, head_env, log_path, settings, rank)
            process.wait_until_up(settings.start_timeout_seconds)
            started[0] = 1
        finally:
            request = comm.Ibcast(started, root=0)
            wait_request(request, None)
            if not started[0] and process is not None:
                process.stop(settings.stop_timeout_seconds)
    else:
        wait_request(comm.Ibcast(started, root=0), None)
        if not started[0]:
            return None
    release = np.zeros(1, dtype=np.int8)
    if rank != 0:
        released = False
        stuck_seconds = 3 * settings.stop_timeout_seconds + 10 + EXIT_GRACE_SECONDS  # the waits below, then the exit
        head_gone = HeadGone(head.address, head.free_ports[0])
        try:
            def join() -> RayNodeJoin:
                node = RayNodeJoin(ray_start_command(me, labels[rank], head_address, temp_dir, settings),
                                   temp_dir, env, log_path, settings, rank)
                try:
                    node.wait_until_up(settings.start_timeout_seconds)
                except RayClusterError as error:  # the driver names the missing node; the waves go on
                    log.error("%s: %s", labels[rank], error)
                return node

            process = _join_in_waves(comm, settings, join, head_gone)
            if process is None:
                return None
            end_once_head_gone(HeadGone(head.address, head.free_ports[0]), stuck_seconds, rank, process)
            # until the driver is done, or the head is gone without a word (or this node never came up)
            released = wait_request(comm.Ibcast(release, root=0), None,
                                    HeadGone(head.address, head.free_ports[0], process))
        finally:
            end_if_stuck(stuck_seconds, 0, rank, process)
            if process is not None:
                process.stop(settings.stop_timeout_seconds)
            if released:
                wait_request(comm.Ibarrier(), settings.stop_timeout_seconds + 10)  # the head goes last
        return None
    assert process is not None
    # After a failure (a lost node among them) the head does not wait long for the others: a rank
    # that is gone never takes the release or reaches the barrier, the ones left stop by themselves
    # once the head is gone (HeadGone), and the error should reach the user.
    release_seconds, barrier_seconds = FAILED_WAIT_SECONDS, FAILED_WAIT_SECONDS
    driven = False
    outcome: Any = None
    try:
        head_process = process
        if _join_in_waves(comm, settings, None, lambda: not head_process.process.alive()) is None:
            raise RayClusterError(f"the Ray head exited while the nodes joined:\n{head_process.process.log_tail()}")
        result = _drive(driver, layout, labels, head_address, env, settings, process, bootstrap_started)
        release_seconds, barrier_seconds = settings.stop_timeout_seconds, settings.stop_timeout_seconds + 10
        driven, outcome = True, result
        return result
    except BaseException as error:
        outcome = error
        # Said at once: MPI may hold this process in the teardown below until it is ended.
        log.error("rank 0: the run failed: %s", error)
        raise
    finally:
        end_if_stuck(release_seconds + barrier_seconds + settings.stop_timeout_seconds + EXIT_GRACE_SECONDS,
                     0 if driven else 1, rank, process,
                     (lambda: keep_outcome(outcome)) if keep_outcome is not None and outcome is not None else None)
        if wait_request(comm.Ibcast(release, root=0), release_seconds):
            wait_request(comm.Ibarrier(), barrier_seconds)
        process.stop(settings.stop_timeout_seconds)


def next_wave_size(size: int, slowest_seconds: float, first_seconds: float, retried: bool,
                   settings: RaySettings) -> int:
    """How many nodes join in the next wave: twice as many while a wave comes up within
    `join_wave_slowdown` times the first wave's time (one node alone: the GCS and the cores keep
    up), as many when slower, half as many after a node needed another attempt; 1 to `join_wave_max`."""
    if retried:
        return max(1, size // 2)
    if slowest_seconds <= settings.join_wave_slowdown * first_seconds:
        return min(size * 2, settings.join_wave_max)
    return size


def _join_in_waves(comm: Any, settings: RaySettings, join: Callable[[], RayNodeJoin] | None,
                   give_up: Callable[[], bool]) -> RayNodeJoin | bool | None:
    """Collective over all ranks once the head is up: ranks 1, 2, ... start their nodes in waves
    (`join` on the ranks of the current wave; rank 0 passes None), each wave once the one before
    it is up, its size from `next_wave_size` on every rank alike (an allreduce of the slowest
    node's seconds and whether any needed another attempt). This rank's node (rank 0: True), or
    None when `give_up` said so while waiting for a wave."""
    from mpi4py import MPI

    rank, num_ranks = comm.Get_rank(), comm.Get_size()
    node: RayNodeJoin | None = None
    first, size, first_seconds = 1, 1, 0.0
    while first < num_ranks:
        last = min(first + size - 1, num_ranks - 1)
        mine = np.zeros(2)
        if join is not None and first <= rank <= last:
            began = time.monotonic()
            node = join()
            mine[:] = time.monotonic() - began, float(node.attempts > 1)
        slowest = np.zeros(2)
        if not wait_request(comm.Iallreduce(mine, slowest, op=MPI.MAX), None, give_up):
            return None
        log.info("ranks %d-%d joined in %.1f s%s", first, last, slowest[0], " (with retries)" if slowest[1] else "")
        first_seconds = first_seconds or float(slowest[0])
        first, size = last + 1, next_wave_size(size, float(slowest[0]), first_seconds, bool(slowest[1]), settings)
    return node if join is not None else True


def _drive(driver: Callable[[RayClusterInfo], T], layout: ClusterLayout, labels: tuple[str, ...],
           head_address: str, env: dict[str, str], settings: RaySettings, head: RayNodeJoin,
           bootstrap_started: float) -> T:
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_USAGE_STATS_ENABLED"):
        os.environ[name] = env[name]  # Ray reads these once, when it is imported
    import ray

    ray.init(address=head_address, _node_ip_address=layout.head.address, include_dashboard=False,
             logging_level=logging.WARNING, log_to_driver=True)
    try:
        node_ids = _wait_for_nodes(labels, settings.start_timeout_seconds, head)
        info = RayClusterInfo(layout=layout, labels=labels, head_address=head_address, node_ids=node_ids,
                              join_seconds=round(time.monotonic() - bootstrap_started, 2))
        return driver(info)
    finally:
        ray.shutdown()
