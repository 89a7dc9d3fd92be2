"""Separate hosts with limited network links, emulated on one machine (root and iproute2 needed).

Each host is a network namespace with one veth link to a bridge in the root namespace. The link is
limited with `tc tbf` in both directions (host egress inside the namespace, host ingress on the
bridge side), like a host's network card. Addresses are 10.213.0.(i+1)/24 and reach only the other
emulated hosts. Processes of the different hosts still share the machine's cores and memory, but
every byte between hosts crosses two limited links, so a learner that sends one copy per receiver
is limited by its own link as on a cluster. Unix-domain (IPC) sockets still work across the
namespaces, which the benchmarks use for their control messages only.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator

PREFIX = "lhpc-bc"
BRIDGE = "lhpcbr0"
INNER_LINK = "lhpc0"  # the same name inside every namespace
SUBNET = "10.213.0"


def namespaces(count: int) -> list[str]:
    return [f"{PREFIX}{i}" for i in range(count)]


def addresses(count: int) -> list[str]:
    return [f"{SUBNET}.{i + 1}" for i in range(count)]


def _run(command: list[str], check: bool = True) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if check and done.returncode:
        raise SystemExit(f"emulated links need root and iproute2: `{' '.join(command)}` failed: {done.stderr.strip()}")


def _ip(*args: str, check: bool = True) -> None:
    _run(["ip", *args], check)


def _shaper(*prefix: str, device: str, rate: str) -> None:
    _run([*prefix, "tc", "qdisc", "add", "dev", device, "root", "tbf", "rate", rate, "burst", "256kb", "latency", "50ms"])


def teardown(count: int) -> None:
    for i, namespace in enumerate(namespaces(count)):
        _ip("link", "del", f"lhpcp{i}", check=False)
        _ip("netns", "del", namespace, check=False)
    _ip("link", "del", BRIDGE, check=False)


@contextlib.contextmanager
def emulated_hosts(count: int, rate: str = "1gbit") -> Iterator[list[str]]:
    """`count` hosts with `rate`-limited links; removed again on exit, also after an error."""
    teardown(count)  # leftovers of an interrupted run
    try:
        _ip("link", "add", BRIDGE, "type", "bridge")
        _ip("link", "set", BRIDGE, "up")
        for i, (namespace, address) in enumerate(zip(namespaces(count), addresses(count))):
            _ip("netns", "add", namespace)
            _ip("link", "add", f"lhpcp{i}", "type", "veth", "peer", "name", f"lhpcv{i}")
            _ip("link", "set", f"lhpcv{i}", "netns", namespace)
            inside = ("ip", "netns", "exec", namespace)
            _run([*inside, "ip", "link", "set", f"lhpcv{i}", "name", INNER_LINK])
            _run([*inside, "ip", "addr", "add", f"{address}/24", "dev", INNER_LINK])
            _run([*inside, "ip", "link", "set", INNER_LINK, "up"])
            _run([*inside, "ip", "link", "set", "lo", "up"])
            _ip("link", "set", f"lhpcp{i}", "master", BRIDGE, "up")
            _shaper(*inside, device=INNER_LINK, rate=rate)
            _shaper(device=f"lhpcp{i}", rate=rate)
        yield addresses(count)
    finally:
        teardown(count)
