"""Settings of `lamarckian-hpc launch`: the Slurm allocation a run gets and how it is followed.

They come from the command line (`--nodes 4 --cpus-per-node 40 ...`) and are validated here like
any config section, so a typo in a partition flag fails with one line before anything is
submitted. Partition, account and exclusions are never hard-coded anywhere else.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, computed_field

from .base import Section

_TIME = re.compile(r"^(?:(?P<days>\d+)-)?(?P<a>\d+)(?::(?P<b>\d+))?(?::(?P<c>\d+))?$")


def slurm_time_minutes(text: str) -> int:
    """Slurm's time formats (`90`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM[:SS]`) in whole minutes, rounded up."""
    match = _TIME.match(text.strip())
    if not match:
        raise ValueError(f"expected minutes, MM:SS, HH:MM:SS or D-HH:MM:SS, got {text!r}")
    days = int(match["days"] or 0)
    parts = [int(part) for part in (match["a"], match["b"], match["c"]) if part is not None]
    if match["days"] is not None:  # D-HH, D-HH:MM, D-HH:MM:SS
        hours, minutes, seconds = (parts + [0, 0])[:3]
    elif len(parts) == 1:
        hours, minutes, seconds = 0, parts[0], 0
    elif len(parts) == 2:
        hours, minutes, seconds = 0, parts[0], parts[1]
    else:
        hours, minutes, seconds = parts
    total_seconds = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    return max(1, -(-total_seconds // 60))


def _checked_time(value: str) -> str:
    slurm_time_minutes(value)
    return value


#: A Slurm time limit, checked when the config is read.
SlurmTime = Annotated[str, AfterValidator(_checked_time)]


class ActorJobConfig(Section):
    """One actor job: CPU nodes that join a running run (`lamarckian-hpc join`, or `launch --actor-jobs`)."""

    nodes: int = Field(1, ge=1, le=100_000, description="Nodes of the actor job; one actor per CPU on each.")
    cpus_per_node: int = Field(1, ge=1, le=4096, description="CPUs per node: the node's actors.")
    partition: str | None = Field(None, min_length=1, description="Slurm partition of the actor job; default the cluster's.")
    account: str | None = Field(None, min_length=1, description="Slurm account to charge.")
    time: SlurmTime = Field("60", description="Time limit of the actor job (minutes, MM:SS, HH:MM:SS or D-HH:MM:SS); "
                                        "it leaves the run cleanly when Slurm warns it.")
    constraint: str | None = Field(None, min_length=1, description="Slurm node features required.")
    job_name: str = Field("lamarckian-hpc-actors", min_length=1, description="Slurm job name.")
    folder: Path = Field(Path("slurm-jobs"), description="Where submitit keeps each job's script, logs and result.")
    signal_delay_seconds: int = Field(30, ge=5, le=3600, description="Slurm warns the job this long before its time "
                                                                     "limit; its nodes leave the run then.")
    reconnect_seconds: float = Field(600.0, gt=0, le=86_400, description=(
        "How long the job waits for the run's learner: before it first runs (queued behind this job) and after "
        "its job was requeued; then the actor job ends."))
    ray_object_store_mb: int = Field(200, ge=80, le=1_000_000, description="Ray object store per node.")

    @computed_field(description="Derived: the time limit in whole minutes, rounded up.")  # type: ignore[prop-decorator]
    @property
    def time_minutes(self) -> int:
        return slurm_time_minutes(self.time)


class LaunchConfig(Section):
    nodes: int = Field(1, ge=1, le=100_000, description="Nodes of the allocation; one bootstrap task each.")
    cpus_per_node: int = Field(1, ge=1, le=4096, description="CPUs per node (Ray's CPUs there; actors default to all but the learner's).")
    gpus_per_node: int = Field(0, ge=0, le=64, description="GPUs per node.")
    partition: str | None = Field(None, min_length=1, description="Slurm partition; default the cluster's.")
    account: str | None = Field(None, min_length=1, description="Slurm account to charge.")
    time: SlurmTime = Field("60", description="Time limit per run of the job: minutes, MM:SS, HH:MM:SS or D-HH:MM:SS.")
    exclude: str | None = Field(None, min_length=1, description="Nodes not to use (a Slurm host list).")
    constraint: str | None = Field(None, min_length=1, description="Slurm node features required.")
    job_name: str = Field("lamarckian-hpc", min_length=1, description="Slurm job name.")
    folder: Path = Field(Path("slurm-jobs"), description="Where submitit keeps each job's script, logs and result (<folder>/<job id>).")
    max_requeues: int = Field(3, ge=0, le=100, description="Time-limit requeues before the job is left to end.")
    signal_delay_seconds: int = Field(90, ge=10, le=3600, description="Slurm warns the job this long before its time limit; it checkpoints and requeues.")
    srun_mpi: Literal["pmi2", "pmix"] = Field("pmi2", description="srun's MPI plugin for the bootstrap tasks (--mpi): pmi2 for MPICH and Intel MPI, pmix for Open MPI; `srun --mpi=list` shows a cluster's.")
    ray_object_store_mb: int = Field(200, ge=50, le=1_000_000, description="Ray object store per node.")
    poll_interval_seconds: float = Field(2.0, gt=0, le=300, description="How often the launcher asks Slurm about the job.")
    wait_timeout_seconds: float | None = Field(None, gt=0, description="Give up following the job after this long; default: the time limit times (requeues + 1) plus an hour of queueing.")
    actor_jobs: int = Field(0, ge=0, le=10_000, description=(
        "Actor jobs submitted beside the learner job (the settings above are the learner job's): CPU nodes that "
        "join the run as they start, from their own partition and queue, each with the `join` options given "
        "as --actor-nodes, --actor-cpus-per-node, --actor-partition, --actor-time, .... 0: one job, every node "
        "alike."))

    @computed_field(description="Derived: the time limit in whole minutes, rounded up.")  # type: ignore[prop-decorator]
    @property
    def time_minutes(self) -> int:
        return slurm_time_minutes(self.time)
