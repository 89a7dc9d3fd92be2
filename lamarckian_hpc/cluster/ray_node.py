"""One Ray node of a job's cluster: its `ray start --block` process, started again when it exits
before its node is up, and stopped with everything it started (see ray_cluster.py for why each
precaution is there). Nothing here talks MPI."""

from __future__ import annotations

import glob
import logging
import math
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field

import numpy as np

log = logging.getLogger(__name__)

POLL_SECONDS = 0.1
STARTED_LINE = b"Ray runtime started."  # what `ray start` prints once its node has registered


#: How long a node of a job may stay silent before its Ray counts it dead (`runtime.node_loss_seconds`).
NODE_LOSS_SECONDS = 30.0
#: Ray's health checks of every node, once a second, each given a second to answer.
HEALTH_CHECK_PERIOD_MS = 1000


def health_check_env(node_loss_seconds: float) -> dict[str, str]:
    """Ray's settings for noticing a lost node after `node_loss_seconds`: its control store asks
    every node once a second and counts the node dead after that many checks in a row went
    unanswered. Ray never takes back a node it declared dead (its raylet exits when it hears of
    it), so this is the longest silence a run rides through; Ray's own defaults (every 3 s, 5
    misses) allow about 15 s."""
    checks = max(2, math.ceil(node_loss_seconds * 1000 / HEALTH_CHECK_PERIOD_MS))
    return {"RAY_health_check_period_ms": str(HEALTH_CHECK_PERIOD_MS),
            "RAY_health_check_timeout_ms": str(HEALTH_CHECK_PERIOD_MS),
            "RAY_health_check_failure_threshold": str(checks)}


@dataclass(frozen=True)
class RaySettings:
    """How the job's Ray nodes start, join and stop (the job's `cluster` settings)."""

    object_store_bytes: int = 150 * 1024 * 1024
    start_timeout_seconds: float = 180.0  # the head's start, and the join window after the last wave
    stop_timeout_seconds: float = 15.0
    temp_root: str | None = None          # default: $TMPDIR or /tmp
    extra_env: dict[str, str] = field(default_factory=dict)
    node_loss_seconds: float = NODE_LOSS_SECONDS  # a node silent this long is lost (`health_check_env`)
    join_wave_max: int = 32               # nodes join in waves of 1, 2, 4, ... up to this many ...
    join_wave_slowdown: float = 1.5       # ... doubling while a wave is up within this times the first's time
    join_attempts: int = 4                # `ray start` runs per node, when it exits before its node is up
    join_retry_seconds: float = 3.0       # pause before a node's next attempt (plus up to as much again)


class RayClusterError(RuntimeError):
    """The Ray cluster could not be started; the message names the node and the log to read."""


class RayNodeProcess:
    """One `ray start --block`, its own session, its own temp dir."""

    def __init__(self, command: list[str], temp_dir: str, env: dict[str, str], log_path: str) -> None:
        self.temp_dir = temp_dir
        self.log_path = log_path
        with open(log_path, "ab") as log_file:
            self.log_offset = log_file.tell()  # this attempt's output starts here
            os.makedirs(temp_dir, exist_ok=True)
            self.process = subprocess.Popen(command, env=env, stdout=log_file, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)

    def alive(self) -> bool:
        return self.process.poll() is None

    def started(self) -> bool:
        """Whether `ray start` said its node is up (it has registered with the GCS)."""
        try:
            with open(self.log_path, "rb") as log_file:
                log_file.seek(self.log_offset)
                return STARTED_LINE in log_file.read()
        except OSError:
            return False

    def log_tail(self, lines: int = 15) -> str:
        try:
            with open(self.log_path, errors="replace") as log_file:
                return "".join(log_file.readlines()[-lines:])
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL for the whole session at once, without waiting: the last thing a process that is
        being ended does, so that the node's ports close (other ranks watch the head's)."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

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


class RayNodeJoin:
    """This rank's Ray node, started again when its `ray start` exits before the node is up (the
    GCS or the cores were too busy to register it within Ray's 30 s), up to `attempts` times, each
    after a pause with jitter so that failed nodes do not all come back at once."""

    def __init__(self, command: list[str], temp_dir: str, env: dict[str, str], log_path: str,
                 settings: RaySettings, rank: int) -> None:
        self.command, self.temp_dir, self.env, self.log_path = command, temp_dir, env, log_path
        self.settings = settings
        self.attempts = 0
        self.random = np.random.default_rng([rank, os.getpid()])
        self.process = self._start()
        self.joined_at: float | None = None

    def _start(self) -> RayNodeProcess:
        self.attempts += 1
        self.started_at = time.monotonic()
        return RayNodeProcess(self.command, self.temp_dir, self.env, self.log_path)

    def check(self) -> bool:
        """Restart a node that failed to come up, if attempts are left; whether it is up now."""
        if self.joined_at is None and self.process.started():
            self.joined_at = time.monotonic()
        if self.joined_at is not None or self.process.alive():
            return self.joined_at is not None
        if self.attempts >= self.settings.join_attempts:
            return False
        log.warning("ray start exited with status %s before its node was up (attempt %d of %d); starting it again",
                    self.process.process.returncode, self.attempts, self.settings.join_attempts)
        self.process.stop(self.settings.stop_timeout_seconds)
        time.sleep(self.settings.join_retry_seconds * (1.0 + self.random.random()))
        self.process = self._start()
        return False

    def wait_until_up(self, timeout_seconds: float) -> None:
        """Block until the node is up; RayClusterError once attempts or time run out."""
        deadline = time.monotonic() + timeout_seconds
        while not self.check():
            if not self.process.alive() and self.attempts >= self.settings.join_attempts:
                raise RayClusterError(f"ray start failed {self.attempts} times; the last exited with status "
                                      f"{self.process.process.returncode}:\n{self.process.log_tail()}")
            if time.monotonic() > deadline:
                raise RayClusterError(f"ray start did not bring its node up within {timeout_seconds:.0f} s "
                                      f"({self.attempts} attempts):\n{self.process.log_tail()}")
            time.sleep(POLL_SECONDS)

    def stop(self, timeout_seconds: float) -> None:
        self.process.stop(timeout_seconds)

    def kill(self) -> None:
        self.process.kill()


def remove_earlier_attempts(temp_root: str, job_id: str | None, rank: int) -> None:
    """A requeued job's earlier run may have been killed before its teardown: stop what is left
    of its Ray node on this rank and remove its temp dir (same job id, so nobody else's)."""
    if job_id is None:
        return
    for stale in glob.glob(os.path.join(temp_root, f"lhr-{job_id}-*-{rank}")):
        _kill_processes_mentioning(stale)
        shutil.rmtree(stale, ignore_errors=True)
