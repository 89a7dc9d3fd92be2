"""Bootstrap discovery on real MPI ranks: plain `mpiexec -n 4` (PyPI's mpich, oversubscribed on
this machine) and `srun --mpi=pmi2` on the 4-node test cluster; and Slurm's environment as
python-hostlist expands it."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from optional_parts import require_mpi, require_slurm

from lamarckian_hpc.cluster.slurm_env import SlurmJob, expand_nodelist

MPI_TIMEOUT_SECONDS = 90


def _mpiexec() -> str:
    beside_python = Path(sys.executable).parent / "mpiexec"
    found = str(beside_python) if beside_python.exists() else shutil.which("mpiexec")
    if found is None:
        pytest.fail("mpiexec not found: install the slurm extra and PyPI's mpich (pip install mpich)")
    return found


def test_slurm_environment_is_expanded_by_hostlist():
    job = SlurmJob.from_environ({
        "SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "node[1-3],gpu7", "SLURM_JOB_CPUS_PER_NODE": "40(x3),8",
        "SLURMD_NODENAME": "node2", "SLURM_NODEID": "1", "SLURM_PROCID": "1", "SLURM_NTASKS": "4",
        "SLURM_RESTART_COUNT": "2",
    })
    assert job is not None
    assert job.nodes == ("node1", "node2", "node3", "gpu7")
    assert job.cpus_per_node == (40, 40, 40, 8)
    assert (job.node_name, job.node_id, job.proc_id, job.cpus_on_node, job.restart_count) == ("node2", 1, 1, 40, 2)
    assert job.head_node == "node1"
    assert SlurmJob.from_environ({"PATH": "/bin"}) is None
    assert expand_nodelist("n[08-10]") == ("n08", "n09", "n10")
    with pytest.raises(ValueError, match="SLURM_JOB_NODELIST"):
        expand_nodelist("node[3-1")
    with pytest.raises(ValueError, match="SLURM_JOB_CPUS_PER_NODE"):
        SlurmJob.from_environ({"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "a[1-2]", "SLURM_JOB_CPUS_PER_NODE": "4"})


def _run_discovery(launcher: list[str], tmp_path: Path, ports: int) -> dict:
    out = tmp_path / "layout.json"
    env = {key: value for key, value in os.environ.items() if not key.startswith(("SLURM_", "PMI_"))}
    if launcher[0] == "srun":
        env["SLURM_CONF"] = os.environ["SLURM_CONF"]
    done = subprocess.run([*launcher, sys.executable, "-m", "lamarckian_hpc.cluster.discovery", "--json", str(out),
                           "--ports", str(ports)], capture_output=True, text=True, timeout=MPI_TIMEOUT_SECONDS,
                          env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(out.read_text())


def test_discovery_gathers_every_rank_under_mpiexec(tmp_path):
    require_mpi()
    layout = _run_discovery([_mpiexec(), "-n", "4"], tmp_path, ports=3)
    nodes = layout["nodes"]
    assert [node["rank"] for node in nodes] == [0, 1, 2, 3]
    assert layout["job_id"] is None
    for node in nodes:
        assert node["hostname"] == socket.gethostname()
        assert node["node_name"] == socket.gethostname()
        assert node["cores"] == len(os.sched_getaffinity(0))
        assert len(node["free_ports"]) == 3
        socket.inet_aton(node["address"])
    # Ranks on one host held their ports while gathering: no port is reported twice.
    ports = [port for node in nodes for port in node["free_ports"]]
    assert len(set(ports)) == 12


def test_discovery_under_srun_pmi2_sees_each_simulated_node(tmp_path):
    require_slurm(4)
    layout = _run_discovery(["srun", "-N", "4", "--ntasks-per-node=1", "--mpi=pmi2"], tmp_path, ports=2)
    nodes = layout["nodes"]
    assert [node["node_name"] for node in nodes] == ["node1", "node2", "node3", "node4"]
    assert layout["job_id"]
    # Each simulated node is reached at the address its name resolves to, all different.
    assert [node["address"] for node in nodes] == [socket.gethostbyname(f"node{k}") for k in range(1, 5)]
    assert len({node["address"] for node in nodes}) == 4
