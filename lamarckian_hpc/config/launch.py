"""Settings of `lamarckian-hpc launch`: the Slurm allocation a run gets and how it is followed.

They come from the command line (`--nodes 4 --cpus-per-node 40 ...`) and are validated here like
any config section, so a typo in a partition flag fails with one line before anything is
submitted. Partition, account and exclusions are never hard-coded anywhere else.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, computed_field, field_validator

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


class LaunchConfig(Section):
    nodes: int = Field(1, ge=1, le=100_000, description="Nodes of the allocation; one bootstrap task each.")
    cpus_per_node: int = Field(1, ge=1, le=4096, description="CPUs per node (Ray's CPUs there; actors default to all but the learner's).")
    gpus_per_node: int = Field(0, ge=0, le=64, description="GPUs per node.")
    partition: str | None = Field(None, min_length=1, description="Slurm partition; default the cluster's.")
    account: str | None = Field(None, min_length=1, description="Slurm account to charge.")
    time: str = Field("60", description="Time limit per run of the job: minutes, MM:SS, HH:MM:SS or D-HH:MM:SS.")
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

    @field_validator("time")
    @classmethod
    def _valid_time(cls, value: str) -> str:
        slurm_time_minutes(value)
        return value

    @computed_field(description="Derived: the time limit in whole minutes, rounded up.")  # type: ignore[prop-decorator]
    @property
    def time_minutes(self) -> int:
        return slurm_time_minutes(self.time)
