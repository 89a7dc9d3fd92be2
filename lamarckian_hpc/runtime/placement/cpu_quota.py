"""A process joins the CPU group its host names for it, so that a share of a machine behaves as a
host of its own cores.

The test cluster (slurm/testcluster, `TESTCLUSTER_NODE_CPUS=... TESTCLUSTER_CPU_QUOTA_SCOPE=actors`)
gives each simulated node a cgroup with a CFS quota and names it in every task's environment
(`LAMARCKIAN_HPC_CPU_CGROUP`, inherited by `ray start`, the raylet and Ray's workers); an actor
calls `join_cpu_group()` first thing, and its sampling then runs on that node's cores only. The
learner has a group of its own (`LAMARCKIAN_HPC_LEARNER_CPU_CGROUP`, `join_learner_cpu_group()`).
Without the variable both are no-ops, as on a real cluster, where a host's cores are its own. A
group that cannot be joined is a warning, never an error: the run goes on with the machine's cores.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

CPU_CGROUP_VARIABLE = "LAMARCKIAN_HPC_CPU_CGROUP"
LEARNER_CPU_CGROUP_VARIABLE = "LAMARCKIAN_HPC_LEARNER_CPU_CGROUP"


def join_group(variable: str, pid: int | None = None) -> str | None:
    """Move `pid` (default: this process) into the cgroup directory that `variable` names: the
    group joined, or None when the variable is unset or the group cannot be joined (one-line warning).

    The whole process moves, all its threads; children it starts afterwards follow it, earlier ones stay."""
    group = os.environ.get(variable, "")
    if not group:
        return None
    pid = os.getpid() if pid is None else pid
    try:
        with open(os.path.join(group, "cgroup.procs"), "w") as procs:
            procs.write(f"{pid}\n")
    except OSError as error:
        log.warning("%s=%s: process %d stays in its CPU group (%s)", variable, group, pid,
                    error.strerror or error)
        return None
    return group


def join_cpu_group(pid: int | None = None) -> str | None:
    """An actor process joins its node's CPU group ($LAMARCKIAN_HPC_CPU_CGROUP), if it has one."""
    return join_group(CPU_CGROUP_VARIABLE, pid)


def join_learner_cpu_group(pid: int | None = None) -> str | None:
    """The learner (driver) process joins the learner's CPU group ($LAMARCKIAN_HPC_LEARNER_CPU_CGROUP), if any."""
    return join_group(LEARNER_CPU_CGROUP_VARIABLE, pid)


def cpu_group_of(pid: int | None = None) -> str:
    """The cgroup v1 cpu group a process is in ('/' for the root group), from /proc/<pid>/cgroup."""
    pid = os.getpid() if pid is None else pid
    with open(f"/proc/{pid}/cgroup") as groups:
        for line in groups:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if "cpu" in controllers.split(","):
                return path
    return "/"
