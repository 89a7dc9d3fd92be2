"""What Slurm tells a task about its job, read from the environment with python-hostlist.

Slurm compresses node lists (`node[1-4,7]`) and per-node counts (`2(x3),1`); hand-written
parsers of these formats are a classic source of bugs, so both are expanded by python-hostlist.
Outside Slurm (`mpiexec`, a laptop) `SlurmJob.from_environ` returns None and callers fall back
to the host's own name.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import hostlist


def expand_nodelist(nodelist: str) -> tuple[str, ...]:
    """`node[1-3],gpu7` -> ('node1', 'node2', 'node3', 'gpu7'), in Slurm's order."""
    try:
        return tuple(hostlist.expand_hostlist(nodelist))
    except hostlist.BadHostlist as error:
        raise ValueError(f"SLURM_JOB_NODELIST: cannot expand {nodelist!r}: {error}") from None


def _int(environ: Mapping[str, str], name: str, default: int) -> int:
    value = environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name}: expected an integer, got {value!r}") from None


@dataclass(frozen=True)
class SlurmJob:
    """One task's view of its Slurm job."""

    job_id: str
    nodes: tuple[str, ...]             # every node of the allocation, in Slurm's order
    node_name: str                     # the Slurm name of this task's node (SLURMD_NODENAME)
    proc_id: int                       # global task rank (SLURM_PROCID)
    num_tasks: int                     # SLURM_NTASKS
    node_id: int                       # index of this node in `nodes` (SLURM_NODEID)
    cpus_on_node: int                  # CPUs allocated to the job on this node
    cpus_per_node: tuple[int, ...]     # CPUs allocated on each node of `nodes`
    gpus_on_node: int
    restart_count: int                 # how often the job was requeued (0 on the first run)
    submit_dir: str | None

    @property
    def head_node(self) -> str:
        return self.nodes[0]

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> SlurmJob | None:
        """The job this process belongs to, or None outside a Slurm job."""
        env = os.environ if environ is None else environ
        job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
        nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
        if not job_id or not nodelist:
            return None
        nodes = expand_nodelist(nodelist)
        per_node = env.get("SLURM_JOB_CPUS_PER_NODE")
        cpus_per_node = tuple(hostlist.parse_slurm_tasks_per_node(per_node)) if per_node else (1,) * len(nodes)
        if len(cpus_per_node) != len(nodes):
            raise ValueError(f"SLURM_JOB_CPUS_PER_NODE: {per_node!r} has {len(cpus_per_node)} entries "
                             f"for {len(nodes)} nodes")
        node_id = _int(env, "SLURM_NODEID", 0)
        node_name = env.get("SLURMD_NODENAME") or nodes[min(node_id, len(nodes) - 1)]
        return cls(
            job_id=job_id,
            nodes=nodes,
            node_name=node_name,
            proc_id=_int(env, "SLURM_PROCID", 0),
            num_tasks=_int(env, "SLURM_NTASKS", len(nodes)),
            node_id=node_id,
            cpus_on_node=_int(env, "SLURM_CPUS_ON_NODE", cpus_per_node[min(node_id, len(nodes) - 1)]),
            cpus_per_node=cpus_per_node,
            gpus_on_node=_int(env, "SLURM_GPUS_ON_NODE", 0),
            restart_count=_int(env, "SLURM_RESTART_COUNT", 0),
            submit_dir=env.get("SLURM_SUBMIT_DIR"),
        )
