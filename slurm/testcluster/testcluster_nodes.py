"""Losing a node of the one-machine test cluster (slurm/testcluster), as a crashed host loses it.

A real node that dies takes with it its slurmd, the job's step daemons (slurmstepd) and every
process of the job there: the bootstrap task, its Ray node (raylet, object store, workers) and the
actors. On the test cluster every simulated node is a `slurmd -N nodeK` in its own network and UTS
namespaces on this host (slurm/testcluster), and every
process a job step starts there carries `SLURMD_NODENAME=nodeK` in its environment (Ray's
processes inherit it from the bootstrap task), so those are exactly the processes to kill. They
are all stopped first (SIGSTOP) and then killed, so that none of them reports the others' death
(a step daemon would otherwise tell srun that its task exited): the rest of the job learns of the
loss the way it would from a dead host, through Ray's health checks and Slurm's `SlurmdTimeout`.

`restore_node` restarts the node's slurmd and returns it to service, so later jobs get all nodes.
Test-cluster tooling, not part of the package: tests/test_node_loss.py and benchmarks/reliability/node_loss.py
import it from this folder. Needs root, as the test cluster does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

TESTCLUSTER_DIR = Path(os.environ.get("TESTCLUSTER_DIR", "/var/tmp/lamarckian-testcluster"))
COMMAND_TIMEOUT_SECONDS = 30.0


@dataclass(frozen=True)
class KilledNode:
    node: str
    slurmd_pid: int
    step_daemon_pids: tuple[int, ...]
    job_pids: tuple[int, ...]      # the job's processes on the node (tasks, Ray, actors)
    killed_at: float               # time.monotonic() of the kill


def _environ(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return []


def _parent(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[1])  # the name in parentheses may hold spaces


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def job_processes_on(node: str, job_id: str | None = None) -> list[int]:
    """Processes started by Slurm steps on `node` (of `job_id` only, when given)."""
    marker = f"SLURMD_NODENAME={node}".encode()
    job_marker = None if job_id is None else f"SLURM_JOB_ID={job_id}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        environ = _environ(int(entry))
        if marker in environ and (job_marker is None or job_marker in environ):
            found.append(int(entry))
    return found


def _command_line(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").rstrip("\0").split("\0")
    except OSError:
        return []


def job_processes_titled(node: str, job_id: str, title: str) -> list[int]:
    """The job's processes on `node` whose command line starts with `title`: Ray names its worker
    processes after the actor they hold (`ray::ActorProcess`, `ray::RelayProcess`)."""
    return sorted(pid for pid in job_processes_on(node, job_id) if " ".join(_command_line(pid)).startswith(title))


def bootstrap_task(node: str, job_id: str) -> int:
    """The job's bootstrap task on `node` (submitit's `_submit` process that slurmstepd started): on
    the first node it is the driver, the learner's process."""
    tasks = [pid for pid in job_processes_on(node, job_id)
             if _name(_parent(pid)) == "slurmstepd" and "submitit.core._submit" in _command_line(pid)]
    if len(tasks) != 1:
        raise RuntimeError(f"{len(tasks)} bootstrap tasks of job {job_id} on {node}: {tasks}")
    return tasks[0]


def slurmd_pid(node: str) -> int:
    return int((TESTCLUSTER_DIR / "nodes" / node / "slurmd.pid").read_text().strip())


def kill_node(node: str, job_id: str | None = None) -> KilledNode:
    """SIGKILL the node's slurmd, its step daemons and the job's processes there, all at once."""
    daemon = slurmd_pid(node)
    tasks = job_processes_on(node, job_id)
    step_daemons = sorted({_parent(pid) for pid in tasks if _name(_parent(pid)) == "slurmstepd"})
    victims = [daemon, *step_daemons, *tasks]
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for pid in victims:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
    killed_at = time.monotonic()
    # What the job started on the node may have started more in the meantime (Ray workers).
    for pid in job_processes_on(node, job_id):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return KilledNode(node, daemon, tuple(step_daemons), tuple(tasks), killed_at)


def _scontrol(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_SECONDS)


def node_state(node: str) -> str:
    """Slurm's state of the node, e.g. IDLE, ALLOCATED, DOWN*, IDLE+NOT_RESPONDING."""
    done = _scontrol("show", "node", node)
    for word in done.stdout.split():
        if word.startswith("State="):
            return word.removeprefix("State=")
    return "UNKNOWN"


def restore_node(node: str, timeout_seconds: float = 90.0) -> None:
    """Restart the node's slurmd and wait until Slurm has it idle again (resumed when it was DOWN)."""
    conf = os.environ.get("SLURM_CONF", str(TESTCLUSTER_DIR / "slurm.conf"))
    try:
        os.kill(slurmd_pid(node), 0)
        running = True
    except (ProcessLookupError, FileNotFoundError, ValueError):
        running = False
    if not running:
        # The cluster's own starter puts the slurmd back into the node's namespaces; a slurmd
        # started here would run in this host's network, where no step reaches it.
        starter = TESTCLUSTER_DIR / "start-node"
        command = [str(starter), node] if starter.is_file() else ["slurmd", "-f", conf, "-N", node]
        subprocess.run(command, check=True, timeout=COMMAND_TIMEOUT_SECONDS)
    deadline = time.monotonic() + timeout_seconds
    while True:
        state = node_state(node)
        if state == "IDLE":
            return
        if "DOWN" in state or "DRAIN" in state:
            _scontrol("update", f"nodename={node}", "state=resume")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{node} is {state} {timeout_seconds:.0f} s after its slurmd was restarted; "
                               f"see {TESTCLUSTER_DIR}/nodes/{node}/slurmd.log")
        time.sleep(0.5)


def remove_job_leftovers(job_id: str, temp_root: str = "/tmp") -> list[str]:
    """Once the job has ended: the Ray temp dirs its lost node could not remove (a real node's
    /tmp goes with the node; here all nodes share one), and any process still naming them."""
    import glob
    import shutil

    from lamarckian_hpc.cluster.ray_node import _kill_processes_mentioning

    removed = glob.glob(os.path.join(temp_root, f"lhr-{job_id}-*"))
    for folder in removed:
        _kill_processes_mentioning(folder)
        shutil.rmtree(folder, ignore_errors=True)
    return removed
