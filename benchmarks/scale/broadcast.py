"""Time until a weight blob has reached every receiver: flat PUB/SUB vs the relay tree vs MPI Bcast.

The receivers stand for actor processes, `--per-node` of them on each simulated node, so K
receivers make K / per-node nodes; the learner sits on the first node. Each node is one process
holding its receivers (each a `WeightSubscriber` with its own ZeroMQ context) and, for the tree,
the node's `Relay`:

- flat: the learner's XPUB sends every version to every receiver over TCP (what
  `runtime.broadcast=flat` does);
- tree: the learner sends to the relays of `build_tree(nodes)` over TCP, relays forward to the
  relays below them over TCP, and every node's receivers read over IPC (`runtime.broadcast=tree`);
- mpi: `mpiexec -n K+1` ranks and mpi4py's `Bcast` of the same number of bytes from rank 0.

One sample is the time from the learner's send to the last receiver holding the whole message
(`time.monotonic`, one clock for all processes of the machine), after a barrier-like quiet pause;
the table shows medians. A receiver counts a message once it is decoded (zero-copy array views).

`--emulate-links` puts every simulated node in its own network namespace joined by veth pairs to
a bridge, each link limited with `tc tbf rate <--link-rate>` in both directions: separate hosts
whose network links, the learner's among them, are the bottleneck (needs root and iproute2). The
MPI ranks then run in the namespaces too, over TCP (shared memory is turned off). Without it,
everything runs on loopback, where all processes share the machine's cores and memory bandwidth.

Needs the `bench` extra (mpi4py and PyPI's mpich) for the MPI column; `--no-mpi` leaves it out.

    python benchmarks/scale/broadcast.py [--receivers 4 8 16 32] [--per-node 2] [--megabytes 4] [--reps 10]
                                   [--emulate-links] [--link-rate 1gbit] [--no-mpi] [--output PATH]

Prints a Markdown table and writes benchmarks/results/broadcast.json, or `--output` (one section
per link mode; a run updates only its own mode's section of that file). MPI runs `mpiexec` from
PATH; when it, or mpi4py, is missing the row records `mpi_error` and the MPI column is n/a. The
runtime encrypts its sockets with CURVE by default (`runtime.transport_security`); `--curve` does
the same here (every TCP or IPC connection is encrypted separately, so each copy also costs the
sender CPU), the MPI column stays plain.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import zmq

from benchmarks import common
from benchmarks.scale import netem
from lamarckian_hpc.comm import JobKeys, WeightPublisher, WeightSubscriber, stop_authenticator
from lamarckian_hpc.comm.relay import Relay, RelaySpec
from lamarckian_hpc.comm.topology import build_tree

RESULTS = Path(__file__).resolve().parents[1] / "results" / "broadcast.json"
TIMEOUT_S = 60.0


# ---------------------------------------------------------------- one simulated node (a process)
def node_main(spec: dict[str, Any]) -> None:
    """Receivers (and the relay, for the tree) of one node; runs until killed."""
    context = zmq.Context()
    report = context.socket(zmq.PUSH)
    report.connect(spec["collect"])
    relay_address = ""
    if spec["relay"] is not None:
        relay = Relay(RelaySpec(**spec["relay"]), zmq.Context())
        relay_address = relay.address
        threading.Thread(target=relay.run, daemon=True).start()
    for index in range(spec["receivers"]):
        threading.Thread(target=_receive, args=(spec, index), daemon=True).start()
    report.send_json({"ready": spec["node"], "relay": relay_address})
    parent = os.getppid()
    while os.getppid() == parent:  # SIGTERM ends the process; so does the learner's end
        time.sleep(0.5)


def _receive(spec: dict[str, Any], index: int) -> None:
    context = zmq.Context()  # its own I/O thread, as a separate actor process has
    report = context.socket(zmq.PUSH)
    report.connect(spec["collect"])
    keys = JobKeys.load(spec["key_folder"]) if spec["key_folder"] else None
    subscriber = WeightSubscriber(context, spec["address"], keys=keys)
    while True:
        message = subscriber.poll(100)
        if message is not None:
            done = time.monotonic()
            report.send_json({"node": spec["node"], "receiver": index, "version": message.policy_version,
                              "done": done, "bytes": int(sum(a.nbytes for a in message.arrays.values()))})


# ---------------------------------------------------------------- the learner side (this process)
class ZmqBroadcast:
    """Start the nodes of one setup, then time versions published by the learner."""

    def __init__(self, mode: str, receivers: int, per_node: int, hosts: list[str], workdir: str,
                 namespaces: list[str] | None, keys: JobKeys | None) -> None:
        self.mode, self.receivers = mode, receivers
        self.nodes = [f"h{i}" for i in range(receivers // per_node)]
        self.tree = build_tree(self.nodes)
        self.context = zmq.Context()
        # Keys by role: relays serve with the relay folder's keys, receivers hold only an actor's.
        self.relay_key_folder = str(keys.relay_folder) if keys is not None else None
        self.key_folder = str(keys.actor_folder) if keys is not None else None
        self.publisher = WeightPublisher(self.context, host=hosts[0], keys=keys)
        self.collect = self.context.socket(zmq.PULL)
        self.collect.bind(f"ipc://{workdir}/collect-{mode}-{receivers}.ipc")
        ipc = [f"{workdir}/{mode}-{receivers}-{i}.ipc" for i in range(len(self.nodes))]
        if mode == "tree":
            self.publisher.socket.bind(f"ipc://{ipc[0]}")
        self.processes: list[subprocess.Popen] = []
        self.hosts, self.workdir, self.namespaces, self.per_node, self.ipc = hosts, workdir, namespaces, per_node, ipc

    def start(self) -> None:
        """Node processes, parents first so that each relay is given its parent's address."""
        mode, receivers, hosts, ipc = self.mode, self.receivers, self.hosts, self.ipc
        addresses = {self.nodes[0]: self.publisher.address}
        layers = [[0]] + [[i for i, n in enumerate(self.nodes) if i and self.tree.layer_of(n) == k] for k in (1, 2)]
        for layer in layers if mode == "tree" else [list(range(len(self.nodes)))]:
            started = []
            for i in layer:
                node = self.nodes[i]
                relay = None
                if mode == "tree" and i > 0:
                    relay = RelaySpec(node, self.tree.to_dict(), dict(addresses), host=hosts[i],
                                      ipc_path=ipc[i], key_folder=self.relay_key_folder).to_dict()
                address = f"ipc://{ipc[i]}" if mode == "tree" else self.publisher.address
                spec = {"node": node, "receivers": self.per_node, "address": address, "relay": relay,
                        "key_folder": self.key_folder,
                        "collect": f"ipc://{self.workdir}/collect-{mode}-{receivers}.ipc"}
                prefix = ["ip", "netns", "exec", self.namespaces[i]] if self.namespaces else []
                command = [*prefix, sys.executable, __file__, "--node-spec", json.dumps(spec)]
                self.processes.append(subprocess.Popen(command))
                started.append(node)
            for reply in self._replies(len(started), lambda m: "ready" in m):
                if reply["relay"]:
                    addresses[reply["ready"]] = reply["relay"]

    def _replies(self, count: int, accept, timeout_s: float = TIMEOUT_S) -> list[dict[str, Any]]:
        got: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout_s
        while len(got) < count:
            self.publisher.serve_joins()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.mode}, {self.receivers} receivers: {len(got)} of {count} replies")
            if self.collect.poll(20):
                message = self.collect.recv_json()
                if accept(message):
                    got.append(message)
        return got

    def time_version(self, version: int, arrays: dict[str, np.ndarray]) -> float:
        """Seconds from the learner's send until the last receiver has `version`."""
        start = time.monotonic()
        self.publisher.publish(version, arrays)
        replies = self._replies(self.receivers, lambda m: m.get("version") == version)
        return max(r["done"] for r in replies) - start

    def close(self) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
        self.publisher.close()
        self.collect.close()
        stop_authenticator(self.context)
        self.context.term()


def measure_zmq(mode: str, receivers: int, args: argparse.Namespace, hosts: list[str], workdir: str,
                namespaces: list[str] | None) -> list[float]:
    arrays = {"weights": np.random.default_rng(0).standard_normal(args.megabytes * 2**18).astype(np.float32)}
    keys = JobKeys.create(os.path.join(workdir, "keys"), relays=True) if args.curve else None
    setup = ZmqBroadcast(mode, receivers, args.per_node, hosts, workdir, namespaces, keys)
    try:
        setup.start()
        for warmup in range(args.warmup):
            setup.time_version(warmup, arrays)
        samples = []
        for rep in range(args.reps):
            time.sleep(args.pause)
            samples.append(setup.time_version(args.warmup + rep, arrays))
        return samples
    finally:
        setup.close()


# ---------------------------------------------------------------- MPI
def mpi_main(nbytes: int, reps: int, warmup: int) -> None:
    """Rank 0 broadcasts `nbytes`; prints the per-rep seconds until the last rank returned."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    buffer = np.zeros(nbytes, dtype=np.uint8)
    if comm.rank == 0:
        buffer[:] = np.random.default_rng(0).integers(0, 255, nbytes, dtype=np.uint8)
    samples = []
    for rep in range(warmup + reps):
        comm.Barrier()
        start = time.monotonic()
        comm.Bcast(buffer, root=0)
        done = comm.gather(time.monotonic(), root=0)
        if comm.rank == 0 and rep >= warmup:
            samples.append(max(done) - start)
    if comm.rank == 0:
        print("MPI-SAMPLES " + json.dumps(samples), flush=True)


def measure_mpi(receivers: int, args: argparse.Namespace, namespaces: list[str] | None) -> list[float]:
    ranks = receivers + 1
    inner = [sys.executable, __file__, "--mpi-worker", str(args.megabytes * 2**20), str(args.reps), str(args.warmup)]
    env = dict(os.environ)
    if namespaces:
        # Rank r > 0 is receiver r-1 on node (r-1) // per_node; rank 0 is the learner on node 0.
        env.update({"MPIR_CVAR_NOLOCAL": "1", "MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp",
                    "FI_TCP_IFACE": netem.INNER_LINK, "UCX_NET_DEVICES": netem.INNER_LINK})
        script = (f'r=${{PMI_RANK:-0}}; n=$(( r > 0 ? (r - 1) / {args.per_node} : 0 )); '
                  f'exec ip netns exec {netem.PREFIX}$n "$@"')
        inner = ["sh", "-c", script, "rank", *inner]
    output = subprocess.run(["mpiexec", "-n", str(ranks), *inner], capture_output=True, text=True, env=env,
                            timeout=args.mpi_timeout)
    for line in output.stdout.splitlines():
        if line.startswith("MPI-SAMPLES "):
            return json.loads(line.removeprefix("MPI-SAMPLES "))
    raise RuntimeError(f"mpiexec -n {ranks} failed ({output.returncode}): {output.stderr.strip()[-500:]}")


# ---------------------------------------------------------------- driver
def run(args: argparse.Namespace) -> dict[str, Any]:
    link_mode = ("emulated" if args.emulate_links else "loopback") + ("+curve" if args.curve else "")
    nodes = max(args.receivers) // args.per_node
    namespaces = netem.namespaces(nodes) if args.emulate_links else None
    hosts = netem.addresses(nodes) if args.emulate_links else ["127.0.0.1"] * nodes
    workdir = tempfile.mkdtemp(prefix="lhpc-bc-")
    os.chmod(workdir, 0o777)
    rows = []
    try:
        for receivers in args.receivers:
            if receivers % args.per_node:
                raise SystemExit(f"--receivers {receivers} is not a multiple of --per-node {args.per_node}")
            row: dict[str, Any] = {"receivers": receivers, "nodes": receivers // args.per_node,
                                   "tree_fanout": build_tree([f"h{i}" for i in range(receivers // args.per_node)]).fanout}
            for mode in ("flat", "tree"):
                row[f"{mode}_s"] = measure_zmq(mode, receivers, args, hosts, workdir, namespaces)
            if not args.no_mpi:
                try:
                    row["mpi_s"] = measure_mpi(receivers, args, namespaces)
                except (RuntimeError, subprocess.TimeoutExpired, FileNotFoundError) as error:
                    row["mpi_error"] = str(error)[-300:]
                    print(f"MPI, {receivers} receivers: {row['mpi_error']}", file=sys.stderr)
            for key in ("flat_s", "tree_s", "mpi_s"):
                if key in row:
                    row[key.replace("_s", "_median_ms")] = 1000 * statistics.median(row[key])
            rows.append(row)
            print_row(row, header=len(rows) == 1)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return {"link_mode": link_mode, "link_rate": args.link_rate if args.emulate_links else None,
            "megabytes": args.megabytes, "per_node": args.per_node, "reps": args.reps, "rows": rows}


def print_row(row: dict[str, Any], header: bool) -> None:
    if header:
        print("| receivers | nodes | fan-out | flat ms | tree ms | MPI Bcast ms | tree / MPI | tree / flat |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    mpi = row.get("mpi_median_ms")
    cells = [row["receivers"], row["nodes"], row["tree_fanout"], f"{row['flat_median_ms']:.1f}",
             f"{row['tree_median_ms']:.1f}", "n/a" if mpi is None else f"{mpi:.1f}",
             "n/a" if mpi is None else f"{row['tree_median_ms'] / mpi:.2f}",
             f"{row['tree_median_ms'] / row['flat_median_ms']:.2f}"]
    print("| " + " | ".join(str(c) for c in cells) + " |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--receivers", type=int, nargs="+", default=[4, 8, 16, 32])
    parser.add_argument("--per-node", type=int, default=2, help="receivers (actors) per simulated node")
    parser.add_argument("--megabytes", type=int, default=4)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--pause", type=float, default=0.1, help="seconds of quiet before each timed version")
    parser.add_argument("--emulate-links", action="store_true")
    parser.add_argument("--link-rate", default="1gbit")
    parser.add_argument("--no-mpi", action="store_true")
    parser.add_argument("--curve", action="store_true", help="encrypt the ZeroMQ sockets as the runtime does by default")
    parser.add_argument("--mpi-timeout", type=float, default=300.0)
    parser.add_argument("--output", type=Path, default=RESULTS,
                        help="results file; a run replaces only its own link mode's section (default: %(default)s)")
    parser.add_argument("--node-spec", help=argparse.SUPPRESS)
    parser.add_argument("--mpi-worker", nargs=3, type=int, help=argparse.SUPPRESS)
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    common.add_common_args(parser)
    args = parser.parse_args()
    if args.node_spec:
        return node_main(json.loads(args.node_spec))
    if args.mpi_worker:
        return mpi_main(*args.mpi_worker)
    if args.emulate_links and not args.inside:
        # Build the hosts, then run this script again as the learner on host 0.
        nodes = max(args.receivers) // args.per_node
        with netem.emulated_hosts(nodes, args.link_rate):
            command = ["ip", "netns", "exec", netem.namespaces(nodes)[0], sys.executable, *sys.argv, "--inside"]
            raise SystemExit(subprocess.run(command).returncode)
    result = run(args)
    result.update(machine=platform.node(), cores=os.cpu_count(), python=platform.python_version(),
                  date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    output = args.output
    stored = common.read_results(output, args.label, provenance=False) or {}
    stored[result["link_mode"]] = result
    output.parent.mkdir(parents=True, exist_ok=True)
    common.write_results(output, stored, args.label)
    print(f"wrote {output} ({result['link_mode']})")


if __name__ == "__main__":
    main()
