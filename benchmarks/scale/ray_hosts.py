"""Emulated hosts as a Ray cluster: a Ray node in every network namespace of `netem.emulated_hosts`,
each with its own host name and, optionally, its own cores (`cpu_groups.py`), for
`sampling_hosts.py`. The head comes up whole first and the others join in waves, as
`lamarckian_hpc/cluster/ray_cluster.py` brings a Slurm job's nodes up: on 2 cores, 16 nodes started
at once miss Ray's 30 s registration window.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.scale import netem
from benchmarks.scale.cpu_groups import CpuGroup
from lamarckian_hpc.runtime.placement.cpu_quota import CPU_CGROUP_VARIABLE, LEARNER_CPU_CGROUP_VARIABLE

RAY = str(Path(sys.executable).with_name("ray"))
HEAD_PORT = 46479
START_TIMEOUT_S = 180.0
START_ATTEMPTS = 3
MAX_WAVE = 4  # nodes joining at once: 8 at once missed Ray's 30 s window on 2 cores (cluster/ray_cluster.py)


def on_host(index: int, command: list[str]) -> list[str]:
    """`command` in emulated host `index`: its network namespace and a host name of its own, which
    its actors report in their hello. nsenter rather than `ip netns exec`, which remounts /sys
    and so hides the cgroups Ray's raylet reads."""
    namespace = netem.namespaces(index + 1)[index]
    return ["nsenter", f"--net=/run/netns/{namespace}", "unshare", "--uts", "sh", "-c",
            f'hostname {namespace} && exec "$@"', "sh", *command]


def ray_env() -> dict[str, str]:
    """One token for the whole cluster and every driver that joins it."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("RAY_")}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32), RAY_USAGE_STATS_ENABLED="0")
    return env


class RayCluster:
    """A Ray head in host 0 and a worker in every other host, each with `cpus` CPUs; with CPU
    groups, host i's Ray node names `groups[i]` to its actors and the learner's run `learner_group`."""

    def __init__(self, addresses: list[str], cpus: int, env: dict[str, str], groups: list[CpuGroup] | None = None,
                 learner_group: CpuGroup | None = None) -> None:
        self.addresses, self.cpus, self.env = addresses, cpus, env
        self.groups, self.learner_group = groups or [], learner_group
        self.host_env = [{CPU_CGROUP_VARIABLE: str(group.path)} for group in self.groups] or [{} for _ in addresses]
        self.learner_env = {LEARNER_CPU_CGROUP_VARIABLE: str(learner_group.path)} if learner_group else {}
        # Short: Ray's Unix socket paths sit about 75 characters below it and may not pass 107 bytes.
        self.temp = tempfile.mkdtemp(prefix="lhs-", dir="/tmp")
        self.processes: dict[int, subprocess.Popen] = {}
        self.logs: dict[int, list[str]] = {}
        self.join_seconds = 0.0

    @property
    def address(self) -> str:
        return f"{self.addresses[0]}:{HEAD_PORT}"

    def _start(self, index: int) -> threading.Event:
        role = ["--head", f"--port={HEAD_PORT}", "--include-dashboard=false"] if index == 0 else \
            [f"--address={self.address}"]
        command = [RAY, "start", "--block", "--disable-usage-stats", f"--node-ip-address={self.addresses[index]}",
                   f"--num-cpus={self.cpus}", "--object-store-memory=104857600", f"--temp-dir={self.temp}/{index}",
                   *role]
        process = subprocess.Popen(on_host(index, command), env={**self.env, **self.host_env[index]},
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.processes[index] = process
        lines: list[str] = []
        self.logs[index] = lines
        started = threading.Event()

        def read() -> None:  # `ray start --block` says so once the node has joined, then keeps running
            for line in process.stdout:
                lines.append(line)
                if "Ray runtime started" in line:
                    started.set()
        threading.Thread(target=read, daemon=True).start()
        return started

    def _wait(self, index: int, started: threading.Event) -> bool:
        """True once node `index` is up; False when its `ray start` exited first; an error past the timeout."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while not started.wait(0.5):
            if self.processes[index].poll() is not None:
                return False
            if time.monotonic() > deadline:
                raise RuntimeError(f"Ray node in host {index} did not start:\n{''.join(self.logs[index])[-3000:]}")
        return True

    def _bring_up(self, indices: list[int]) -> None:
        """Start `indices` at once and wait for them; a node whose `ray start` exits is started again."""
        for _attempt in range(START_ATTEMPTS):
            events = {index: self._start(index) for index in indices}
            indices = [index for index, started in events.items() if not self._wait(index, started)]
            if not indices:
                return
            time.sleep(3.0)
        raise RuntimeError(f"Ray nodes in hosts {indices} did not start after {START_ATTEMPTS} attempts:\n"
                           f"{''.join(self.logs[indices[0]])[-3000:]}")

    def start(self) -> None:
        """The head whole first; then the others in waves of 1, 2, 4, 4, ... nodes."""
        began = time.monotonic()
        self._bring_up([0])
        waiting, wave = list(range(1, len(self.addresses))), 1
        while waiting:
            self._bring_up(waiting[:wave])
            waiting, wave = waiting[wave:], min(2 * wave, MAX_WAVE)
        self.join_seconds = time.monotonic() - began

    def stop(self) -> None:
        for process in self.processes.values():
            process.terminate()  # `ray start --block` stops its node's processes on SIGTERM
        for process in self.processes.values():
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
        shutil.rmtree(self.temp, ignore_errors=True)
