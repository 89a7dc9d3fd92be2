"""The `launch` subcommand's arguments and handler, kept beside the launcher so that `cli.py`
only registers it. Nothing here imports submitit until the command runs: the `slurm` extra is
optional."""

from __future__ import annotations

import argparse
import shutil
import sys
from typing import Any

LAUNCH_FLAGS: dict[str, tuple[str, type, str]] = {
    # flag: (LaunchConfig field, type, help)
    "--nodes": ("nodes", int, "nodes of the allocation (one bootstrap task each)"),
    "--cpus-per-node": ("cpus_per_node", int, "CPUs per node"),
    "--gpus-per-node": ("gpus_per_node", int, "GPUs per node"),
    "--partition": ("partition", str, "Slurm partition"),
    "--account": ("account", str, "Slurm account"),
    "--time": ("time", str, "time limit per run: minutes, HH:MM:SS or D-HH:MM:SS"),
    "--exclude": ("exclude", str, "nodes to avoid (Slurm host list)"),
    "--constraint": ("constraint", str, "required node features"),
    "--job-name": ("job_name", str, "Slurm job name"),
    "--folder": ("folder", str, "submitit folder; each job's logs go to FOLDER/<job id>"),
    "--max-requeues": ("max_requeues", int, "time-limit requeues before giving up"),
    "--signal-delay": ("signal_delay_seconds", int, "seconds before the time limit at which the job checkpoints"),
    "--srun-mpi": ("srun_mpi", str, "srun's MPI plugin: pmi2 (MPICH, Intel MPI; default) or pmix (Open MPI)"),
    "--object-store-mb": ("ray_object_store_mb", int, "Ray object store per node (MB)"),
    "--poll": ("poll_interval_seconds", float, "seconds between state checks"),
    "--wait-timeout": ("wait_timeout_seconds", float, "stop following the job after this many seconds"),
    "--actor-jobs": ("actor_jobs", int, "actor jobs submitted beside the learner job (the options above are "
                                        "the learner job's); 0 (default): one job"),
}
#: The settings of one actor job: `join`'s options, and `launch`'s with the prefix --actor-.
ACTOR_JOB_FLAGS: dict[str, tuple[str, type, str]] = {
    "--nodes": ("nodes", int, "nodes of the actor job (one actor per CPU on each)"),
    "--cpus-per-node": ("cpus_per_node", int, "CPUs per node"),
    "--partition": ("partition", str, "Slurm partition"),
    "--account": ("account", str, "Slurm account"),
    "--time": ("time", str, "time limit: minutes, HH:MM:SS or D-HH:MM:SS; the nodes leave cleanly before it"),
    "--constraint": ("constraint", str, "required node features"),
    "--job-name": ("job_name", str, "Slurm job name"),
    "--folder": ("folder", str, "submitit folder; each job's logs go to FOLDER/<job id>"),
    "--signal-delay": ("signal_delay_seconds", int, "seconds before the time limit at which the nodes leave"),
    "--reconnect": ("reconnect_seconds", float, "seconds to wait for the run's learner (queued or requeued)"),
    "--object-store-mb": ("ray_object_store_mb", int, "Ray object store per node (MB)"),
}


def add_launch_parser(commands: Any) -> None:
    launch = commands.add_parser("launch", help="run a train or evolve config on a Slurm allocation (submitit), "
                                                "following the job")
    launch.add_argument("config", help="YAML config file, train or evolve (see configs/)")
    launch.add_argument("overrides", nargs="*", metavar="key.path=value", help="override config fields")
    for flag, (field, kind, text) in LAUNCH_FLAGS.items():
        launch.add_argument(flag, dest=field, type=kind, default=None, help=text)
    for flag, (field, kind, text) in ACTOR_JOB_FLAGS.items():
        launch.add_argument(f"--actor-{flag[2:]}", dest=f"actor_{field}", type=kind, default=None,
                            help=f"each actor job's {text}")
    launch.set_defaults(handler=launch_command)
    join = commands.add_parser("join", help="add an actor job to a running run: its nodes join the run (Slurm, "
                                            "from a login node)")
    join.add_argument("run", help="the run's file (its join folder, RUN.join, is beside it)")
    for flag, (field, kind, text) in ACTOR_JOB_FLAGS.items():
        join.add_argument(flag, dest=field, type=kind, default=None, help=text)
    join.set_defaults(handler=join_command)


def _given(args: argparse.Namespace, prefix: str = "") -> dict[str, Any]:
    return {field: getattr(args, prefix + field) for field, _, _ in ACTOR_JOB_FLAGS.values()
            if getattr(args, prefix + field) is not None}


def _fail(message: str, status: int = 2) -> int:
    print(message, file=sys.stderr)
    return status


def _describe_actor_job(actors: Any) -> str:
    return (f"{actors.nodes} nodes x {actors.cpus_per_node} CPUs" + (f" in {actors.partition}" if actors.partition else "")
            + f", {actors.time_minutes} min")


def _slurm_missing() -> str | None:
    try:
        import mpi4py  # noqa: F401
        import submitit  # noqa: F401
    except ImportError as error:
        return f"error: this command needs the slurm extra ({error.name} is missing): pip install -c constraints.txt -e '.[slurm]'"
    if shutil.which("sbatch") is None:
        return "error: sbatch is not on PATH: this command submits to Slurm from a login node"
    return None


def join_command(args: argparse.Namespace) -> int:
    """Submit an actor job whose nodes join the running run of `args.run`."""
    from pathlib import Path

    from ..config import ConfigError, build_config
    from ..config.launch import ActorJobConfig
    from ..storage.join_folder import JoinFolder, JoinFolderError, join_folder_of

    try:
        actors = build_config(_given(args), "join options", ActorJobConfig)
    except ConfigError as error:
        return _fail(str(error))
    run_path = Path(args.run)
    folder = JoinFolder(join_folder_of(run_path))
    try:
        contact = folder.contact()
    except JoinFolderError as error:
        return _fail(f"error: {error}")
    if contact is None:
        if not folder.path.is_dir():
            return _fail(f"error: cannot join {run_path}: there is no {folder.path} (actor jobs join runs launched on Slurm)")
        if folder.finished():
            return _fail(f"error: cannot join {run_path}: it has finished")
        print(f"{run_path}: its learner job has not started yet (or is requeued); the actor job waits up to "
              f"{actors.reconnect_seconds:.0f} s for it", flush=True)
    problem = _slurm_missing()
    if problem is not None:
        return _fail(problem)
    from .launcher import submit_actor_job

    job = submit_actor_job(run_path, actors)
    print(f"submitted actor job {job.job_id}: {_describe_actor_job(actors)}; its nodes join {run_path} "
          f"as they start (logs {job.paths.folder}; scancel {job.job_id} lets them leave)", flush=True)
    return 0


def launch_command(args: argparse.Namespace) -> int:
    from ..config import ConfigError, build_config, load_config
    from ..config.evorl import config_model
    from ..config.launch import ActorJobConfig, LaunchConfig
    from ..library import run_path_for

    try:
        config = load_config(args.config, args.overrides, config_model(args.config, args.overrides))
        given = {field: getattr(args, field) for field, _, _ in LAUNCH_FLAGS.values()
                 if getattr(args, field) is not None}
        launch = build_config(given, "launch options", LaunchConfig)
        # The actor jobs' logs go beside the learner job's unless --actor-folder says otherwise.
        actors = build_config({"folder": launch.folder, **_given(args, "actor_")}, "launch options (--actor-*)",
                              ActorJobConfig)
    except ConfigError as error:
        return _fail(str(error))
    problem = _slurm_missing()
    if problem is not None:
        return _fail(problem)
    from .job import describe_result
    from .launcher import LaunchError, cancel_jobs, follow, submit, submit_actor_job

    run_path = run_path_for(config, args.config)
    job = submit(config, args.config, run_path, launch, launch.actor_jobs * actors.nodes * actors.cpus_per_node)
    print(f"submitted job {job.job_id}: {launch.nodes} nodes x {launch.cpus_per_node} CPUs"
          + (f", {launch.gpus_per_node} GPUs" if launch.gpus_per_node else "")
          + (f" in {launch.partition}" if launch.partition else "")
          + f"; run file {run_path}; logs {job.paths.folder}", flush=True)
    actor_jobs = tuple(submit_actor_job(run_path, actors) for _ in range(launch.actor_jobs))
    for actor_job in actor_jobs:
        print(f"submitted actor job {actor_job.job_id}: {_describe_actor_job(actors)}", flush=True)
    try:
        outcome = follow(job, run_path, launch, lambda line: print(line, flush=True), actor_jobs)
    except LaunchError as error:
        cancel_jobs(list(actor_jobs))
        return _fail(f"error: {error}", 1)
    except KeyboardInterrupt:
        jobs = " ".join(j.job_id for j in (job, *actor_jobs))
        return _fail(f"stopped following job {job.job_id}; it keeps running (scancel {jobs} ends it)", 130)
    cancel_jobs(list(actor_jobs))  # they end by themselves once the run has finished; this is for sure
    result = outcome.result
    print(f"job {job.job_id} completed: {describe_result(result)}"
          + (f", lost {', '.join(result['lost_nodes'])} and went on without them" if result.get("lost_nodes") else ""))
    print(run_path)
    return 0
