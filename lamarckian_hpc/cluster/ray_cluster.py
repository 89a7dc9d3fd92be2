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

Waiting ranks poll non-blocking MPI requests with a sleep: MPICH's blocking calls spin, which on
a shared node would take cores from the actors. They also stop once the head's Ray node has not
answered for a while: the release is broadcast through other ranks, and a lost node among them
would otherwise leave the ranks below it waiting for ever.
"""

from __future__ import annotations

import glob
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TypeVar

import msgpack
import numpy as np

from .discovery import ClusterLayout, NodeInfo, bcast_bytes, discover

log = logging.getLogger(__name__)

T = TypeVar("T")

# The ports one Ray node listens on; every one is set per job (`port` is the GCS, head only).
RAY_PORT_OPTIONS = ("port", "node-manager-port", "object-manager-port", "metrics-export-port",
                    "dashboard-agent-listen-port", "dashboard-agent-grpc-port", "runtime-env-agent-port",
                    "dashboard-port")
NODE_RESOURCE_PREFIX = "node:"  # custom resource `node:<slurm node name>` on each Ray node
POLL_SECONDS = 0.1
# A rank that waits for the head's release gives up once the head's GCS port has refused
# connections for this long: the head is gone, or one of the ranks that relay the release is (a
# lost node), and waiting longer would keep the job alive for nothing.
HEAD_GONE_SECONDS = 10.0
HEAD_CHECK_SECONDS = 2.0
FAILED_WAIT_SECONDS = 3.0


class RayClusterError(RuntimeError):
    """The Ray cluster could not be started; the message names the node and the log to read."""


@dataclass(frozen=True)
class RaySettings:
    object_store_bytes: int = 150 * 1024 * 1024
    start_timeout_seconds: float = 180.0
    stop_timeout_seconds: float = 15.0
    temp_root: str | None = None          # default: $TMPDIR or /tmp
    extra_env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RayClusterInfo:
    """What the driver needs: where the head is and which Ray node is which Slurm node."""

    layout: ClusterLayout
    labels: tuple[str, ...]               # unique node names, in bootstrap-rank order
    head_address: str                     # ip:port of the GCS
    node_ids: dict[str, str]              # label -> Ray node id

    def to_dict(self) -> dict[str, Any]:
        return {"head_address": self.head_address, "labels": list(self.labels), "node_ids": self.node_ids}


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


def ray_start_command(node: NodeInfo, label: str, head_address: str | None, temp_dir: str,
                      settings: RaySettings) -> list[str]:
    """`ray start --block` for one node; the head when `head_address` is None."""
    ports = dict(zip(RAY_PORT_OPTIONS, node.free_ports))
    command = [ray_executable(), "start", "--block", "--disable-usage-stats", f"--node-ip-address={node.address}",
               f"--temp-dir={temp_dir}", f"--num-cpus={node.cores}", f"--num-gpus={node.gpus}",
               f"--object-store-memory={settings.object_store_bytes}",
               f'--resources={{"{NODE_RESOURCE_PREFIX}{label}": 1}}']
    if head_address is None:
        command += ["--head", "--include-dashboard=false", "--no-monitor"]  # nothing autoscales an allocation
    else:
        command += [f"--address={head_address}"]
        ports.pop("port"), ports.pop("dashboard-port")
    command += [f"--{name}={port}" for name, port in ports.items()]
    return command


class RayNodeProcess:
    """One `ray start --block`, its own session, its own temp dir."""

    def __init__(self, command: list[str], temp_dir: str, env: dict[str, str], log_path: str) -> None:
        self.temp_dir = temp_dir
        self.log_path = log_path
        with open(log_path, "ab") as log_file:
            os.makedirs(temp_dir, exist_ok=True)
            self.process = subprocess.Popen(command, env=env, stdout=log_file, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        try:
            with open(self.log_path, errors="replace") as log_file:
                return "".join(log_file.readlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout_seconds: float) -> None:
        """SIGTERM (Ray drains and stops its processes), then SIGKILL for the whole session."""
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_seconds)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()
        _kill_processes_mentioning(self.temp_dir)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def _kill_processes_mentioning(marker: str) -> None:
    """Kill what escaped the session (Ray workers may start their own): only processes whose
    command line names this node's unique temp dir, so nothing of another job is touched."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                if marker.encode() in cmdline.read():
                    os.kill(int(entry), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            continue


def remove_earlier_attempts(temp_root: str, job_id: str | None, rank: int) -> None:
    """A requeued job's earlier run may have been killed before its teardown: stop what is left
    of its Ray node on this rank and remove its temp dir (same job id, so nobody else's)."""
    if job_id is None:
        return
    for stale in glob.glob(os.path.join(temp_root, f"lhr-{job_id}-*-{rank}")):
        _kill_processes_mentioning(stale)
        shutil.rmtree(stale, ignore_errors=True)


def wait_for_port(host: str, port: int, timeout_seconds: float, process: RayNodeProcess) -> None:
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        if not process.alive():
            raise RayClusterError(f"the Ray head exited with status {process.process.returncode}:\n"
                                  f"{process.log_tail()}")
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except OSError:
            time.sleep(POLL_SECONDS)
    raise RayClusterError(f"the Ray head did not listen on {host}:{port} within {timeout_seconds:.0f} s")


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
    """True once the head's GCS port has not accepted a connection for HEAD_GONE_SECONDS."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.failing_since: float | None = None

    def __call__(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=HEAD_CHECK_SECONDS):
                self.failing_since = None
                return False
        except OSError:
            self.failing_since = self.failing_since or time.monotonic()
            return time.monotonic() - self.failing_since >= HEAD_GONE_SECONDS


def _ray_env(token: str, settings: RaySettings) -> dict[str, str]:
    return {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token, "RAY_USAGE_STATS_ENABLED": "0",
            **settings.extra_env}


def _wait_for_nodes(labels: tuple[str, ...], timeout_seconds: float, processes: RayNodeProcess) -> dict[str, str]:
    """Label -> Ray node id once every node has joined."""
    import ray

    deadline = time.monotonic() + timeout_seconds
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
        if not processes.alive():
            raise RayClusterError(f"the Ray head exited:\n{processes.log_tail()}")
        time.sleep(0.5)


def run_on_ray_cluster(driver: Callable[[RayClusterInfo], T], comm: Any = None,
                       settings: RaySettings | None = None, log_dir: str | None = None) -> T | None:
    """Collective: start Ray over all ranks, run `driver` on rank 0 (the head), tear down.

    Returns the driver's result on rank 0 and None elsewhere; a driver exception propagates on
    rank 0 after the teardown.
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
    process: RayNodeProcess | None = None
    if rank == 0:
        try:
            process = RayNodeProcess(ray_start_command(me, labels[0], None, temp_dir, settings), temp_dir, env, log_path)
            wait_for_port(head.address, head.free_ports[0], settings.start_timeout_seconds, process)
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
        process = RayNodeProcess(ray_start_command(me, labels[rank], head_address, temp_dir, settings),
                                 temp_dir, env, log_path)
    assert process is not None
    release = np.zeros(1, dtype=np.int8)
    if rank != 0:
        released = False
        try:  # until the driver is done, or the head is gone without a word
            released = wait_request(comm.Ibcast(release, root=0), None, HeadGone(head.address, head.free_ports[0]))
        finally:
            process.stop(settings.stop_timeout_seconds)
            if released:
                wait_request(comm.Ibarrier(), settings.stop_timeout_seconds + 10)  # the head goes last
        return None
    # After a failure (a lost node among them) the head does not wait long for the others: a rank
    # that is gone never takes the release or reaches the barrier, the ones left stop by themselves
    # once the head is gone (HeadGone), and the error should reach the user.
    release_seconds, barrier_seconds = FAILED_WAIT_SECONDS, FAILED_WAIT_SECONDS
    try:
        result = _drive(driver, layout, labels, head_address, env, settings, process)
        release_seconds, barrier_seconds = settings.stop_timeout_seconds, settings.stop_timeout_seconds + 10
        return result
    finally:
        if wait_request(comm.Ibcast(release, root=0), release_seconds):
            wait_request(comm.Ibarrier(), barrier_seconds)
        process.stop(settings.stop_timeout_seconds)


def _drive(driver: Callable[[RayClusterInfo], T], layout: ClusterLayout, labels: tuple[str, ...],
           head_address: str, env: dict[str, str], settings: RaySettings, head: RayNodeProcess) -> T:
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_USAGE_STATS_ENABLED"):
        os.environ[name] = env[name]  # Ray reads these once, when it is imported
    import ray

    ray.init(address=head_address, _node_ip_address=layout.head.address, include_dashboard=False,
             logging_level=logging.WARNING, log_to_driver=True)
    try:
        node_ids = _wait_for_nodes(labels, settings.start_timeout_seconds, head)
        return driver(RayClusterInfo(layout=layout, labels=labels, head_address=head_address, node_ids=node_ids))
    finally:
        ray.shutdown()
