"""`lamarckian-hpc launch`: submit a train or evolve run to Slurm through submitit and follow it.

The run's config is validated and its run-file path fixed here, before anything is submitted, so
that a bad config fails at once and the launcher can say where the HDF5 goes and read progress
from it while the job runs. The job is followed with `scheduler.job_state` rather than submitit's
own watcher: without accounting, submitit reads UNKNOWN forever for a job that dies without a
result. Every wait has a deadline; a job that ends without a result is an error naming its state
and its log.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import submitit

from ..config import RootSection, RunConfig
from ..config.launch import ActorJobConfig, LaunchConfig
from ..storage.join_folder import join_folder_of
from .actor_job import ActorJob, ActorJobSpec
from .job import RunJob, RunJobSpec
from .scheduler import JobState, job_state

# A completed job's result file may show on a shared file system a little after its state; a job
# that was cancelled or failed outside Python writes none, so it is given less time.
RESULT_GRACE_SECONDS = {"COMPLETED": 30.0}
DEFAULT_RESULT_GRACE_SECONDS = 5.0
QUEUE_MARGIN_SECONDS = 3600.0


class LaunchError(RuntimeError):
    """The job ended without a result, or could not be followed; one line plus the log's tail."""


@dataclass(frozen=True)
class LaunchResult:
    job_id: str
    state: str
    run_path: Path
    result: dict[str, Any]


def make_executor(launch: LaunchConfig, survive_node_loss: bool = False) -> submitit.SlurmExecutor:
    """A Slurm executor for one bootstrap task per node, with `executor_parameters`. submitit asks
    for `srun` on the PATH as it makes one, so this runs only where Slurm's client commands are."""
    launch.folder.mkdir(parents=True, exist_ok=True)
    executor = submitit.SlurmExecutor(folder=launch.folder / "%j", max_num_timeout=launch.max_requeues)
    executor.update_parameters(**executor_parameters(launch, survive_node_loss))
    return executor


def executor_parameters(launch: LaunchConfig, survive_node_loss: bool = False) -> dict[str, Any]:
    """The job's submitit parameters: one bootstrap task per node, MPI through srun's plugin
    (`srun_mpi`) for discovery.

    `survive_node_loss` (`runtime.on_node_loss=continue`) submits with `--no-kill`, job and step:
    Slurm then keeps the job running when one of its nodes fails instead of ending it NODE_FAIL.
    """
    parameters: dict[str, Any] = {
        "nodes": launch.nodes, "ntasks_per_node": 1, "cpus_per_task": launch.cpus_per_node,
        "time": launch.time_minutes, "job_name": launch.job_name,
        "signal_delay_s": launch.signal_delay_seconds,
        # --kill-on-bad-exit: a bootstrap task that dies ends the job instead of leaving it waiting.
        "srun_args": [f"--mpi={launch.srun_mpi}", "--kill-on-bad-exit=1", *(["--no-kill"] if survive_node_loss else [])],
    }
    if survive_node_loss:
        parameters["additional_parameters"] = {"no_kill": True}
    optional = {"partition": launch.partition, "account": launch.account, "exclude": launch.exclude,
                "constraint": launch.constraint}
    parameters.update({key: value for key, value in optional.items() if value is not None})
    if launch.gpus_per_node:
        parameters["gpus_per_node"] = launch.gpus_per_node
    return parameters


def actor_executor_parameters(actors: ActorJobConfig) -> dict[str, Any]:
    """An actor job's submitit parameters: one task per node, no MPI (its tasks never talk to each
    other), warned `signal_delay_seconds` before its time limit so that its nodes leave cleanly, and
    never requeued: the run goes on without it, and `join` adds others."""
    parameters: dict[str, Any] = {
        "nodes": actors.nodes, "ntasks_per_node": 1, "cpus_per_task": actors.cpus_per_node,
        "time": actors.time_minutes, "job_name": actors.job_name, "signal_delay_s": actors.signal_delay_seconds,
        # One node that fails leaves the run by itself; the job's other nodes stay in it.
        "srun_args": ["--no-kill"], "additional_parameters": {"no_kill": True, "no_requeue": True},
    }
    optional = {"partition": actors.partition, "account": actors.account, "constraint": actors.constraint}
    parameters.update({key: value for key, value in optional.items() if value is not None})
    return parameters


def submit_actor_job(run_path: Path, actors: ActorJobConfig) -> submitit.Job:
    """An actor job for the run whose file is (or will be) at `run_path`: its nodes join the run
    through the run's join folder, whenever Slurm starts them."""
    actors.folder.mkdir(parents=True, exist_ok=True)
    executor = submitit.SlurmExecutor(folder=actors.folder / "%j", max_num_timeout=0)
    executor.update_parameters(**actor_executor_parameters(actors))
    spec = ActorJobSpec(join_folder=str(join_folder_of(run_path.resolve())), log_dir=str((actors.folder / "%j").resolve()),
                        ray_object_store_mb=actors.ray_object_store_mb, reconnect_seconds=actors.reconnect_seconds)
    return executor.submit(ActorJob(), spec)


def cancel_jobs(jobs: list[submitit.Job]) -> None:
    """scancel for jobs that may still run (their nodes then leave the run); errors are ignored."""
    for job in jobs:
        try:
            job.cancel(check=False)
        except Exception:  # noqa: BLE001 - best effort at the end of a launch
            pass


def submit(config: RootSection, config_file: str, run_path: Path, launch: LaunchConfig,
           actor_cpus: int = 0) -> submitit.Job:
    """Submit a train config (RunConfig) or any evolve config; the job's driver runs the matching
    command. `actor_cpus`: the CPUs of the actor jobs launched beside it (a train run sizes its
    messages and credits for their actors too)."""
    command = "train" if isinstance(config, RunConfig) else "evolve"
    spec = RunJobSpec(config=config.to_json_dict(), config_file=str(config_file),
                      run_path=str(run_path.resolve()), log_dir=str((launch.folder / "%j").resolve()),
                      ray_object_store_mb=launch.ray_object_store_mb, command=command, actor_job_cpus=actor_cpus)
    run_path.parent.mkdir(parents=True, exist_ok=True)
    survive = isinstance(config, RunConfig) and config.runtime.on_node_loss == "continue"
    executor = make_executor(launch, survive_node_loss=survive)
    return executor.submit(RunJob(), spec)


def _progress_line(run_path: Path) -> str | None:
    """Frames, policy version, recent return, and actors and their hosts as they come and go, as the
    run file holds them now (None before it exists)."""
    if not run_path.is_file():
        return None
    from ..storage import open_run

    try:
        with open_run(run_path) as run:
            curve = run.metric("episode_return_mean")
            actors, hosts = run.metric("actors_connected").value, run.metric("hosts_connected").value
    except (OSError, KeyError, ValueError):
        return None
    if len(curve.env_frames) == 0:
        return None
    return (f"{int(curve.env_frames[-1]):,} frames, policy version {int(curve.policy_version[-1])}, "
            f"mean return {float(curve.value[-1]):.1f}"
            + (f", {int(actors[-1])} actors on {int(hosts[-1])} hosts" if len(actors) else ""))


def _log_tail(job: submitit.Job, lines: int = 20) -> str:
    try:
        text = job.task(0).paths.stderr.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def wait_timeout(launch: LaunchConfig) -> float:
    if launch.wait_timeout_seconds is not None:
        return launch.wait_timeout_seconds
    return launch.time_minutes * 60.0 * (launch.max_requeues + 1) + QUEUE_MARGIN_SECONDS


def follow(job: submitit.Job, run_path: Path, launch: LaunchConfig,
           say: Callable[[str], None] = print, actor_jobs: tuple[submitit.Job, ...] = ()) -> LaunchResult:
    """Report state changes and progress until the job ends, and the states of its `actor_jobs`;
    its result, or LaunchError."""
    deadline = time.monotonic() + wait_timeout(launch)
    last_state, last_progress = "", ""
    actor_states: dict[str, str] = {}
    final_since: float | None = None
    while True:
        for actor_job in actor_jobs:
            actor_state = job_state(actor_job.job_id).state
            if actor_states.get(actor_job.job_id) != actor_state:
                say(f"actor job {actor_job.job_id}: {actor_state}")
                actor_states[actor_job.job_id] = actor_state
        state = job_state(job.job_id)
        shown = state.state + (f" (restart {state.restarts})" if state.restarts else "")
        if shown != last_state:
            say(f"job {job.job_id}: {shown}" + (f", {state.reason}" if state.reason not in ("", "None") else ""))
            last_state = shown
        progress = _progress_line(run_path)
        if progress and progress != last_progress:
            say(f"job {job.job_id}: {progress}")
            last_progress = progress
        if job.task(0).paths.result_pickle.exists():  # rank 0 holds the driver's result
            return _collect(job, run_path, state)
        if state.final:
            final_since = final_since or time.monotonic()
            if time.monotonic() - final_since > RESULT_GRACE_SECONDS.get(state.state, DEFAULT_RESULT_GRACE_SECONDS):
                raise LaunchError(_ended_without_result(job, state))
        else:
            final_since = None
        if time.monotonic() > deadline:
            raise LaunchError(f"job {job.job_id} still {state.state} after {wait_timeout(launch):.0f} s; "
                              f"stopped following it (it keeps running; scancel {job.job_id} ends it)")
        time.sleep(launch.poll_interval_seconds)


def _collect(job: submitit.Job, run_path: Path, state: JobState) -> LaunchResult:
    try:
        outcome = job.task(0).result()
    except (submitit.core.utils.UncompletedJobError, submitit.core.utils.FailedJobError) as error:
        # A cancelled job's driver may report its own end (SIGTERM) before Slurm has finished the
        # job: wait briefly for the final state, so the message says the job was cancelled.
        settle = time.monotonic() + 15
        while not state.final and time.monotonic() < settle:
            time.sleep(0.5)
            state = job_state(job.job_id)
        how = f"ended {state.state}" if state.final and state.state != "COMPLETED" else "failed"
        raise LaunchError(f"job {job.job_id} {how}: {_exception_line(str(error))}; "
                          f"log: {job.task(0).paths.stderr}") from None
    return LaunchResult(job.job_id, "COMPLETED" if not state.final else state.state, run_path, outcome or {})


def _exception_line(report: str) -> str:
    """The `SomeError: message` line of submitit's report (a traceback followed by log paths)."""
    lines = [line.strip() for line in report.splitlines() if line.strip()]
    for line in reversed(lines):
        if re.match(r"^[\w.]+(Error|Exception|Exit|Interrupt)\b", line):
            return line
    return lines[-1] if lines else "no message"


def _ended_without_result(job: submitit.Job, state: JobState) -> str:
    reason = f", reason {state.reason}" if state.reason not in ("", "None") else ""
    exit_code = f", exit code {state.exit_code}" if state.exit_code else ""
    tail = _log_tail(job)
    return (f"job {job.job_id} ended {state.state}{reason}{exit_code} without a result (from {state.source}); "
            f"log: {job.task(0).paths.stderr}" + (f"\n{tail}" if tail else ""))
