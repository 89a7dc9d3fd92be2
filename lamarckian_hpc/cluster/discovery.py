"""Bootstrap discovery: one task per node tells every other task who it is and where to reach it.

Before Ray or ZeroMQ can connect anything, each node must know the others' reachable addresses and
free ports. One bootstrap task per node (started by `srun --mpi=pmi2`, or by plain `mpiexec`)
describes its node and all tasks exchange the descriptions with one MPI allgather. The
descriptions travel as msgpack bytes in `Allgatherv` buffers, never as pickles.

Free ports are found by binding to port 0 and are held open until every task has gathered, so that
tasks sharing a host (simulated nodes, or several ranks under `mpiexec`) never report the same
port. A port is only a hint once released; Ray and ZeroMQ bind it shortly after.

Run as a program (`mpiexec -n 4 python -m lamarckian_hpc.cluster.discovery`) it prints the
gathered layout as JSON on rank 0.
"""

from __future__ import annotations

import argparse
import glob
import ipaddress
import json
import os
import socket
import sys
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from typing import Any

import msgpack
import numpy as np

from .slurm_env import SlurmJob

ADDRESS_ENV = "LAMARCKIAN_NODE_ADDRESS"  # overrides the detected reachable address of this node
DEFAULT_NUM_PORTS = 8


@dataclass(frozen=True)
class NodeInfo:
    """What one bootstrap task found out about its node."""

    rank: int
    node_name: str          # Slurm's node name, or the host name outside Slurm
    hostname: str
    address: str            # an IPv4 address the other nodes can reach this one at
    cores: int              # CPUs this job may use on the node
    gpus: int
    free_ports: tuple[int, ...]


@dataclass(frozen=True)
class ClusterLayout:
    """Every node of the job, ordered by bootstrap rank (rank 0 hosts the head and the learner)."""

    nodes: tuple[NodeInfo, ...]
    job_id: str | None

    @property
    def head(self) -> NodeInfo:
        return self.nodes[0]

    @property
    def labels(self) -> tuple[str, ...]:
        """A unique name per task: the node name, suffixed with the rank where ranks share a node."""
        names = [node.node_name for node in self.nodes]
        return tuple(name if names.count(name) == 1 else f"{name}-r{node.rank}"
                     for name, node in zip(names, self.nodes))

    def to_dict(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "nodes": [asdict(node) for node in self.nodes]}


def _is_loopback(address: str) -> bool:
    return ipaddress.ip_address(address).is_loopback


def _resolve(name: str) -> str | None:
    try:
        return socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    except (socket.gaierror, IndexError):
        return None


def _outbound_address() -> str | None:
    """The address of the interface that routes off this host (a UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 9))
            return probe.getsockname()[0]
        except OSError:
            return None


def reachable_address(node_name: str, in_slurm: bool) -> str:
    """How other nodes reach this one.

    A Slurm node name resolves to the address the cluster's admins gave it (on the test cluster a
    loopback address of its own), so it is trusted. A bare host name often maps to 127.0.1.1 on
    Debian; then the outbound interface's address is taken instead.
    """
    if os.environ.get(ADDRESS_ENV):
        return os.environ[ADDRESS_ENV]
    resolved = _resolve(node_name)
    if resolved is not None and (in_slurm or not _is_loopback(resolved)):
        return resolved
    return _outbound_address() or resolved or "127.0.0.1"


def count_gpus() -> int:
    """GPUs visible to this task, without importing a GPU library."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([device for device in visible.split(",") if device.strip() and device.strip() != "-1"])
    if os.environ.get("SLURM_GPUS_ON_NODE"):
        return int(os.environ["SLURM_GPUS_ON_NODE"])
    return len(glob.glob("/dev/nvidia[0-9]*"))


def _hold_free_ports(stack: ExitStack, count: int) -> tuple[int, ...]:
    ports = []
    for _ in range(count):
        sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
        sock.bind(("", 0))
        ports.append(sock.getsockname()[1])
    return tuple(ports)


def describe_this_node(rank: int, stack: ExitStack, num_ports: int = DEFAULT_NUM_PORTS) -> NodeInfo:
    """This task's node; the free ports stay bound until `stack` closes."""
    job = SlurmJob.from_environ()
    hostname = socket.gethostname()
    node_name = job.node_name if job else hostname
    cores = job.cpus_on_node if job else len(os.sched_getaffinity(0))
    return NodeInfo(rank=rank, node_name=node_name, hostname=hostname,
                    address=reachable_address(node_name, job is not None), cores=cores, gpus=count_gpus(),
                    free_ports=_hold_free_ports(stack, num_ports))


def allgather_bytes(comm: Any, payload: bytes) -> list[bytes]:
    """Every rank's `payload`, in rank order, through raw MPI buffers (no pickle)."""
    from mpi4py import MPI

    sizes = np.zeros(comm.Get_size(), dtype=np.int64)
    comm.Allgather(np.array([len(payload)], dtype=np.int64), sizes)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    gathered = np.empty(int(sizes.sum()), dtype=np.uint8)
    comm.Allgatherv(np.frombuffer(payload, dtype=np.uint8),
                    [gathered, sizes.tolist(), offsets.tolist(), MPI.BYTE])
    return [gathered[start:start + size].tobytes() for start, size in zip(offsets, sizes)]


def bcast_bytes(comm: Any, payload: bytes | None, root: int = 0) -> bytes:
    """`payload` of rank `root` on every rank, through raw MPI buffers (no pickle)."""
    size = np.array([len(payload) if comm.Get_rank() == root and payload is not None else 0], dtype=np.int64)
    comm.Bcast(size, root=root)
    buffer = (np.frombuffer(payload, dtype=np.uint8).copy() if comm.Get_rank() == root and payload is not None
              else np.empty(int(size[0]), dtype=np.uint8))
    comm.Bcast(buffer, root=root)
    return buffer.tobytes()


def discover(comm: Any = None, num_ports: int = DEFAULT_NUM_PORTS) -> ClusterLayout:
    """Gather every task's `NodeInfo` on every task (a collective call: all ranks must call it)."""
    if comm is None:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
    with ExitStack() as stack:
        mine = describe_this_node(comm.Get_rank(), stack, num_ports)
        gathered = allgather_bytes(comm, msgpack.packb(asdict(mine)))
    nodes = []
    for payload in gathered:
        fields = msgpack.unpackb(payload)
        nodes.append(NodeInfo(**{**fields, "free_ports": tuple(fields["free_ports"])}))
    job = SlurmJob.from_environ()
    return ClusterLayout(nodes=tuple(sorted(nodes, key=lambda node: node.rank)), job_id=job.job_id if job else None)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Gather every bootstrap task's node description.")
    parser.add_argument("--json", metavar="FILE", help="write the layout here (rank 0) instead of stdout")
    parser.add_argument("--ports", type=int, default=DEFAULT_NUM_PORTS, help="free ports per node")
    args = parser.parse_args(argv)
    from mpi4py import MPI

    layout = discover(MPI.COMM_WORLD, args.ports)
    if MPI.COMM_WORLD.Get_rank() == 0:
        text = json.dumps(layout.to_dict(), indent=2)
        if args.json:
            with open(args.json, "w") as out:
                out.write(text)
        else:
            print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
