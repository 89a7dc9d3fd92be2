"""The optional parts that some tests need (a Slurm cluster, an MPI library, Google Research Football,
ALE, the wandb and mlflow extras): each test of such a part skips with the reason when it is absent,
and fails instead when CI's LAMARCKIAN_HPC_REQUIRE_<PART>=1 says the part must be there.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import subprocess
import sys
from types import ModuleType

import pytest


def skip_unless_required(part: str, reason: str, module_level: bool = False) -> None:
    """Skip with `reason`, or fail with it where LAMARCKIAN_HPC_REQUIRE_<PART> is set."""
    __tracebackhide__ = True  # reports name the test, not this helper
    if os.environ.get(f"LAMARCKIAN_HPC_REQUIRE_{part.upper()}", "") not in ("", "0"):
        pytest.fail(f"{reason} (LAMARCKIAN_HPC_REQUIRE_{part.upper()} is set)", pytrace=False)
    pytest.skip(reason, allow_module_level=module_level)


@functools.cache
def mpi_problem() -> str | None:
    """Why mpi4py cannot start MPI here, or None when it can. A fresh process, because loading a
    missing libmpi can abort the process that tries."""
    if importlib.util.find_spec("mpi4py") is None:
        return "mpi4py is not installed (the slurm extra)"
    done = subprocess.run([sys.executable, "-c", "from mpi4py import MPI; MPI.Get_library_version()"],
                          capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"mpi4py finds no MPI library ({last}); pip install mpich, or load the cluster's MPI"
    return None


def require_extra(extra: str, module: str) -> ModuleType:
    """`module`, which the pip extra `extra` installs; a module-level skip saying how to install it
    when it is missing (a failure where LAMARCKIAN_HPC_REQUIRE_<EXTRA> is set)."""
    __tracebackhide__ = True
    try:
        return importlib.import_module(module)
    except ImportError:
        skip_unless_required(extra, f"{module} is not installed (pip install -c constraints.txt -e \".[{extra}]\")",
                             module_level=True)
        raise  # not reached: skip_unless_required skips or fails


def require_mpi() -> None:
    __tracebackhide__ = True
    problem = mpi_problem()
    if problem is not None:
        skip_unless_required("mpi", problem)


def require_slurm(nodes: int) -> None:
    """A Slurm cluster with `nodes` usable nodes, and the slurm extra that jobs run with."""
    __tracebackhide__ = True
    from lamarckian_hpc.cluster.scheduler import cluster_problem

    problem = cluster_problem(nodes)
    if problem is not None:
        skip_unless_required("slurm", f"no Slurm test cluster: {problem} "
                                      f"(slurm/testcluster/start.sh {nodes}, then set SLURM_CONF)")
    problem = mpi_problem()
    if problem is not None:
        skip_unless_required("slurm", f"Slurm jobs need MPI: {problem}")


def separate_hosts(count: int) -> list[str]:
    """The addresses of `count` test-cluster nodes that are apart (each in its own network
    namespace, slurm/testcluster/start.sh), skipping or failing as `require_slurm` does."""
    __tracebackhide__ = True
    require_slurm(count)
    addresses = [address for address in os.environ.get("TESTCLUSTER_NODE_ADDRS", "").split(",") if address]
    if len(addresses) < count or not all(os.path.exists(f"/run/netns/node{k}") for k in range(1, count + 1)):
        skip_unless_required("slurm", f"the test cluster's nodes are not {count} separate network namespaces "
                                      f"(slurm/testcluster/start.sh {count}, then source its env file)")
    return addresses[:count]


def on_host(node: int, command: list[str]) -> list[str]:
    """`command` run on test-cluster node `node`: in its network namespace, named nodeK."""
    return ["nsenter", f"--net=/run/netns/node{node}", "unshare", "--uts", "sh", "-c",
            f'hostname node{node} && exec "$@"', "sh", *command]
