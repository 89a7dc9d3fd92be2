"""Ask Slurm what became of a job, with or without accounting.

submitit reads job states from `sacct`. On clusters without slurmdbd (and on the test cluster)
`sacct` fails, submitit reads UNKNOWN forever, and a job that dies without writing its result
(scancel, a segfault, a node failure) would be waited for forever. The controller itself still
knows every job for `MinJobAge` seconds after it ends, so the state comes from
`scontrol show job` first, `squeue` when scontrol fails, and `sacct` for jobs the controller has
already forgotten. Every call has a timeout.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

COMMAND_TIMEOUT_SECONDS = 30.0

# Job states after which the job does not run again (REQUEUED, PENDING etc. are not among them).
FINAL_STATES = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                          "BOOT_FAIL", "DEADLINE", "PREEMPTED", "SPECIAL_EXIT", "REVOKED"})
GONE = "GONE"          # no source knows the job any more
UNKNOWN = "UNKNOWN"    # Slurm could not be asked (timeout, controller down)


@dataclass(frozen=True)
class JobState:
    state: str              # Slurm's job state, GONE or UNKNOWN
    source: str             # which command answered: scontrol, squeue, sacct or none
    reason: str = ""
    exit_code: str = ""
    restarts: int = 0

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES or self.state == GONE


def _run(command: list[str]) -> subprocess.CompletedProcess[str] | None:
    if shutil.which(command[0]) is None:
        return None
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_SECONDS)
    except (subprocess.TimeoutExpired, OSError):
        return None


def _from_scontrol(job_id: str) -> JobState | None:
    done = _run(["scontrol", "show", "job", "-o", job_id])
    if done is None:
        return None
    if done.returncode != 0:
        return JobState(GONE, "scontrol") if "Invalid job id" in done.stderr else None
    fields = dict(re.findall(r"(\w+)=(\S*)", done.stdout.splitlines()[0] if done.stdout else ""))
    if "JobState" not in fields:
        return None
    return JobState(fields["JobState"], "scontrol", fields.get("Reason", ""), fields.get("ExitCode", ""),
                    int(fields.get("Restarts", "0") or 0))


def _from_squeue(job_id: str) -> JobState | None:
    done = _run(["squeue", "-h", "-j", job_id, "-o", "%T|%r"])
    if done is None or done.returncode != 0:
        return None
    line = done.stdout.strip().splitlines()
    if not line:
        return JobState(GONE, "squeue")  # squeue lists only pending and running jobs
    state, _, reason = line[0].partition("|")
    return JobState(state, "squeue", reason)


def _from_sacct(job_id: str) -> JobState | None:
    done = _run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State,ExitCode"])
    if done is None or done.returncode != 0 or not done.stdout.strip():
        return None  # accounting disabled, or the job is not in it
    state, _, exit_code = done.stdout.strip().splitlines()[-1].partition("|")
    return JobState(state.split()[0], "sacct", exit_code=exit_code)


def job_state(job_id: str) -> JobState:
    """The job's state from the first source that knows it."""
    live = _from_scontrol(job_id) or _from_squeue(job_id)
    if live is not None and live.state != GONE:
        return live
    recorded = _from_sacct(job_id)
    if recorded is not None:
        return recorded
    return live if live is not None else JobState(UNKNOWN, "none")


USABLE_NODE_STATES = frozenset({"idle", "mix", "mixed", "alloc", "allocated", "comp", "completing"})


def cluster_problem(min_nodes: int = 1) -> str | None:
    """Why no Slurm cluster with `min_nodes` usable nodes (idle, or busy but up) answers here, or
    None when one does."""
    if shutil.which("sbatch") is None or shutil.which("sinfo") is None:
        return "Slurm's client commands (sbatch, sinfo) are not on PATH"
    done = _run(["sinfo", "-h", "-N", "-o", "%N %t"])
    if done is None:
        return "sinfo did not answer"
    if done.returncode != 0:
        return f"sinfo failed: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}"
    usable = {name for name, state in (line.split()[:2] for line in done.stdout.splitlines() if line.strip())
              if state.rstrip("*~#!%$@^-") in USABLE_NODE_STATES}
    if len(usable) < min_nodes:
        return f"the Slurm cluster has {len(usable)} usable nodes, {min_nodes} needed"
    return None
