"""A process that joins the CPU group its environment names runs on that group's quota: the test
cluster's hosts of their own cores (slurm/testcluster, TESTCLUSTER_NODE_CPUS). Real cgroups (v1's
cpu controller, as root); skipped where the machine has none."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from optional_parts import require_slurm

from lamarckian_hpc.runtime.placement.cpu_quota import (
    CPU_CGROUP_VARIABLE,
    LEARNER_CPU_CGROUP_VARIABLE,
    cpu_group_of,
    join_cpu_group,
    join_learner_cpu_group,
)

CPU_ROOT = Path("/sys/fs/cgroup/cpu")
BUSY_SECONDS = 2.0

BUSY_IN_GROUP = f"""
import os, sys, time
from lamarckian_hpc.runtime.placement.cpu_quota import cpu_group_of, join_cpu_group, join_learner_cpu_group
joined = (join_learner_cpu_group if sys.argv[1] == "learner" else join_cpu_group)()
before = os.times()
end = time.monotonic() + {BUSY_SECONDS}
while time.monotonic() < end:
    pass
after = os.times()
print(joined, cpu_group_of(), after.user + after.system - before.user - before.system)
"""


@pytest.fixture
def cpu_group():
    """A cgroup with a tenth of a core (10 ms per 100 ms), removed afterwards."""
    if os.geteuid() != 0 or not (CPU_ROOT / "cpu.cfs_quota_us").is_file():
        pytest.skip("needs root and cgroup v1's cpu controller at /sys/fs/cgroup/cpu")
    group = CPU_ROOT / f"lhtc-test-{os.getpid()}"
    group.mkdir()
    try:
        (group / "cpu.cfs_period_us").write_text("100000")
        (group / "cpu.cfs_quota_us").write_text("10000")
        yield group
    finally:
        for pid in (group / "cgroup.procs").read_text().split():
            (CPU_ROOT / "cgroup.procs").write_text(pid)
        group.rmdir()


def _busy(kind: str, env: dict[str, str]) -> tuple[str, str, float]:
    done = subprocess.run([sys.executable, "-c", BUSY_IN_GROUP, kind], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **env})
    assert done.returncode == 0, done.stderr
    joined, group, cpu_seconds = done.stdout.split()
    return joined, group, float(cpu_seconds)


@pytest.mark.parametrize("kind,variable", [("actor", CPU_CGROUP_VARIABLE), ("learner", LEARNER_CPU_CGROUP_VARIABLE)])
def test_a_process_that_joins_its_group_gets_the_group_quota(cpu_group, kind, variable):
    joined, group, cpu_seconds = _busy(kind, {variable: str(cpu_group)})
    assert joined == str(cpu_group) and group == f"/{cpu_group.name}"
    # A tenth of a core over the busy loop (counted from the join), against all of one without the quota.
    assert cpu_seconds < 0.1 * BUSY_SECONDS + 0.15, f"{cpu_seconds:.2f} CPU seconds in {BUSY_SECONDS} s: no quota"


def test_without_the_variable_nothing_moves(monkeypatch):
    monkeypatch.delenv(CPU_CGROUP_VARIABLE, raising=False)
    monkeypatch.delenv(LEARNER_CPU_CGROUP_VARIABLE, raising=False)
    before = cpu_group_of()
    assert join_cpu_group() is None and join_learner_cpu_group() is None
    assert cpu_group_of() == before


def test_a_group_that_cannot_be_joined_is_one_warning(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv(CPU_CGROUP_VARIABLE, str(tmp_path / "no-such-group"))
    with caplog.at_level(logging.WARNING, logger="lamarckian_hpc.runtime.placement.cpu_quota"):
        assert join_cpu_group() is None
    [record] = caplog.records
    message = record.getMessage()
    assert "\n" not in message and "no-such-group" in message and "stays in its CPU group" in message


def test_the_test_cluster_names_each_node_group_in_its_tasks():
    """On a test cluster started with TESTCLUSTER_NODE_CPUS (scope actors), every task of node K
    finds lhtc-nodeK in its environment, and a busy loop that joins it gets that node's quota."""
    if not os.environ.get("TESTCLUSTER_NODE_CPUS") or os.environ.get("TESTCLUSTER_CPU_QUOTA_SCOPE") != "actors":
        pytest.skip("the running test cluster has no per-node quota on actors "
                    "(TESTCLUSTER_NODE_CPUS=0.1 TESTCLUSTER_CPU_QUOTA_SCOPE=actors slurm/testcluster/start.sh 2)")
    require_slurm(2)
    started = time.monotonic()
    done = subprocess.run(["srun", "-N", "2", "--ntasks-per-node=1", sys.executable, "-c",
                           "import socket; print(socket.gethostname(), end=' ');" + BUSY_IN_GROUP, "actor"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    cores = float(os.environ["TESTCLUSTER_NODE_CPUS"])
    for line in done.stdout.splitlines():
        host, joined, group, cpu_seconds = line.split()
        assert joined.endswith(f"/lhtc-{host}") and group == f"/lhtc-{host}", line
        assert float(cpu_seconds) < cores * BUSY_SECONDS + 0.15, line
    assert time.monotonic() - started < 60
