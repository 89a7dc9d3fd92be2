"""Weight copies at a flat start: N subscribers join one after another a publisher holding weights.

A publisher answers every join with its newest weights, so that an actor that starts late is not
left without a policy. Answered with a broadcast, the k-th join sends a copy to all k subscribers
connected by then: N(N+1)/2 copies for a start of N actors, each of the whole weights. Answered on
the joiner's own topic (`comm.channels`), it sends one copy, to the joiner: N in all.

Everything is the runtime's own, with real sockets in one process: a `WeightPublisher` holding
`--megabytes` of float32 weights (version 0), and `WeightSubscriber`s (one ZeroMQ context for all
of them, with two I/O threads) that connect one at a time; the next connects once the last holds
the weights. `flat`: the learner's publisher over TCP, as `runtime.broadcast=flat` connects
actors. `relay`: the learner's publisher feeds a `Relay` (stepped in the same loop), and the
subscribers join the relay's publisher over IPC, as a node's actors do. After the last join, and
a quiet half second, one broadcast (version 1) checks that every subscriber still gets each new
version once.

Every message a subscriber takes off its socket is counted, and its bytes, under the subscriber's
own code (its socket is wrapped, so the count is the same whatever the code does with them): the
same script measures any version of the package, and a run updates only the rows of the join
answer it measured (`join_answer`: to everyone, or to the joiner):

    PYTHONPATH=/path/to/other/checkout python benchmarks/scale/weight_joins.py   # the code being compared
    python benchmarks/scale/weight_joins.py [--subscribers 32 128] [--megabytes 1] [--modes flat relay]

Prints a Markdown table and writes benchmarks/results/weight_joins.json (`--output`).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import zmq

import lamarckian_hpc
from benchmarks import common
from lamarckian_hpc.comm import WeightPublisher, WeightSubscriber, channels
from lamarckian_hpc.comm.relay import Relay, RelaySpec
from lamarckian_hpc.comm.topology import build_tree

RESULTS = Path(__file__).resolve().parents[1] / "results" / "weight_joins.json"
TIMEOUT_S = 120.0
QUIET_S = 0.5


class CountedSocket:
    """A subscriber's SUB socket that counts the messages and bytes taken off it."""

    def __init__(self, socket: zmq.Socket) -> None:
        self.socket, self.messages, self.bytes = socket, 0, 0

    def poll(self, *args: Any, **kwargs: Any) -> int:
        return self.socket.poll(*args, **kwargs)

    def recv_multipart(self, *args: Any, **kwargs: Any) -> list[Any]:
        frames = self.socket.recv_multipart(*args, **kwargs)
        self.messages += 1
        self.bytes += sum(len(frame) for frame in frames)
        return frames

    def close(self) -> None:
        self.socket.close()


def join_answer() -> str:
    """What the measured code does on a join: the join's own topic exists only where it answers
    the joiner alone."""
    return "to the joiner" if hasattr(channels, "JOIN_PREFIX") else "to everyone"


def measure(mode: str, count: int, megabytes: float, workdir: str) -> dict[str, Any]:
    arrays = {"weights": np.random.default_rng(0).standard_normal(int(megabytes * 2**18)).astype(np.float32)}
    learner_context, context = zmq.Context(), zmq.Context(io_threads=2)
    learner = WeightPublisher(learner_context)
    relay = None
    if mode == "relay":
        tree = build_tree(["node0", "node1"])
        relay = Relay(RelaySpec("node1", tree.to_dict(), {"node0": learner.address},
                                ipc_path=f"{workdir}/{mode}-{count}.ipc"), zmq.Context())
    address = relay.ipc_address if relay is not None else learner.address
    publisher = relay.publisher if relay is not None else learner
    subscribers: list[WeightSubscriber] = []
    counted: list[CountedSocket] = []

    def step(wait_ms: int = 1) -> None:
        learner.serve_joins()
        if relay is not None:
            relay.step(wait_ms)
        for subscriber in subscribers:
            subscriber.poll(0)

    def until(done: Any, what: str) -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while not done():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{mode}, {count} subscribers: {what}")
            step()

    def settle() -> None:
        """Drain until no message arrived for QUIET_S."""
        quiet_since, seen = time.monotonic(), -1
        while time.monotonic() - quiet_since < QUIET_S:
            step(5)
            now = sum(socket.messages for socket in counted)
            if now != seen:
                seen, quiet_since = now, time.monotonic()

    try:
        learner.publish(0, arrays)
        if relay is not None:
            until(lambda: relay.stats.version == 0, "the relay got no weights")
        message_bytes = sum(len(frame) for frame in publisher._latest)
        join_ms = []
        start = time.monotonic()
        for _ in range(count):
            subscriber = WeightSubscriber(context, address)
            socket = CountedSocket(subscriber.socket)
            subscriber.socket = socket  # type: ignore[assignment]
            subscribers.append(subscriber)
            counted.append(socket)
            joined = time.monotonic()
            until(lambda subscriber=subscriber: subscriber.version == 0, "a joiner got no weights")
            join_ms.append((time.monotonic() - joined) * 1000)
        all_joined_s = time.monotonic() - start
        settle()
        copies = [socket.messages for socket in counted]
        join_bytes = sum(socket.bytes for socket in counted)
        learner.publish(1, arrays)
        until(lambda: all(subscriber.version == 1 for subscriber in subscribers), "a broadcast did not reach all")
        settle()
        broadcast = [socket.messages - before for socket, before in zip(counted, copies)]
        if max(broadcast) != 1:
            raise AssertionError(f"{mode}, {count} subscribers: a broadcast reached one {max(broadcast)} times")
        return {"mode": mode, "join_answer": join_answer(), "subscribers": count,
                "join_copies": sum(copies), "copies_first": copies[0], "copies_last": copies[-1],
                "join_gigabytes": round(join_bytes / 1e9, 3), "broadcast_copies": sum(broadcast),
                "joins_served": publisher.joins_served, "all_joined_s": round(all_joined_s, 3),
                "join_ms_median": round(statistics.median(join_ms), 2), "join_ms_max": round(max(join_ms), 2),
                "message_bytes": message_bytes}
    finally:
        for subscriber in subscribers:
            subscriber.close()
        if relay is not None:
            relay.close()
            relay.context.destroy(linger=0)
        learner.close()
        context.destroy(linger=0)
        learner_context.destroy(linger=0)


def markdown(rows: list[dict[str, Any]]) -> str:
    columns = ["mode", "join_answer", "subscribers", "join_copies", "copies_first", "copies_last",
               "join_gigabytes", "broadcast_copies", "joins_served", "all_joined_s", "join_ms_median"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(row[column]) for column in columns) + " |" for row in rows]
    return "\n".join(lines)


def commit_of(package: Path) -> str | None:
    """The commit the measured package comes from, "-dirty" when its files differ from it."""
    try:
        commit = subprocess.run(["git", "-C", str(package), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
        changed = subprocess.run(["git", "-C", str(package), "status", "--porcelain", "--", "."],
                                 capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return commit + ("-dirty" if changed else "")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--subscribers", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--megabytes", type=float, default=1.0)
    parser.add_argument("--modes", nargs="+", choices=["flat", "relay"], default=["flat", "relay"])
    parser.add_argument("--output", type=Path, default=RESULTS)
    common.add_common_args(parser)
    args = parser.parse_args(argv)
    package = Path(lamarckian_hpc.__file__).resolve().parent
    rows = []
    with tempfile.TemporaryDirectory(prefix="weight-joins-") as workdir:
        for mode in args.modes:
            for count in args.subscribers:
                row = measure(mode, count, args.megabytes, workdir)
                message_bytes = row.pop("message_bytes")
                row["code"] = f"{package.parent.name}@{commit_of(package)}"
                rows.append(row)
                print(markdown([row]).splitlines()[-1], flush=True)
    print(markdown(rows))
    stored = common.read_results(args.output, args.label, provenance=False) or {}
    kept = [row for row in stored.get("rows", []) if row.get("join_answer") != join_answer()]
    stored.update(time=time.strftime("%Y-%m-%d %H:%M:%S"), host=platform.node(), cpus=os.cpu_count(),
                  load_average=list(os.getloadavg()), megabytes=args.megabytes, message_bytes=message_bytes,
                  rows=sorted(kept + rows, key=lambda row: (row["mode"], row["subscribers"], row["join_answer"])))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    common.write_results(args.output, stored, args.label)


if __name__ == "__main__":
    main()
