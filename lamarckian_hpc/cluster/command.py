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
}


def add_launch_parser(commands: Any) -> None:
    launch = commands.add_parser("launch", help="run a train or evolve config on a Slurm allocation (submitit), "
                                                "following the job")
    launch.add_argument("config", help="YAML config file, train or evolve (see configs/)")
    launch.add_argument("overrides", nargs="*", metavar="key.path=value", help="override config fields")
    for flag, (field, kind, text) in LAUNCH_FLAGS.items():
        launch.add_argument(flag, dest=field, type=kind, default=None, help=text)
    launch.set_defaults(handler=launch_command)


def _fail(message: str, status: int = 2) -> int:
    print(message, file=sys.stderr)
    return status


def launch_command(args: argparse.Namespace) -> int:
    from ..library import run_path_for
    from ..config import ConfigError, build_config, load_config
    from ..config.evorl import config_model
    from ..config.launch import LaunchConfig

    try:
        config = load_config(args.config, args.overrides, config_model(args.config, args.overrides))
        given = {field: getattr(args, field) for field, _, _ in LAUNCH_FLAGS.values()
                 if getattr(args, field) is not None}
        launch = build_config(given, "launch options", LaunchConfig)
    except ConfigError as error:
        return _fail(str(error))
    try:
        import submitit  # noqa: F401
        import mpi4py  # noqa: F401
    except ImportError as error:
        return _fail(f"error: launch needs the slurm extra ({error.name} is missing): "
                     f"pip install -c constraints.txt -e '.[slurm]'")
    if shutil.which("sbatch") is None:
        return _fail("error: sbatch is not on PATH: launch submits to Slurm from a login node")
    from .job import describe_result
    from .launcher import LaunchError, follow, submit

    run_path = run_path_for(config, args.config)
    job = submit(config, args.config, run_path, launch)
    print(f"submitted job {job.job_id}: {launch.nodes} nodes x {launch.cpus_per_node} CPUs; "
          f"run file {run_path}; logs {job.paths.folder}", flush=True)
    try:
        outcome = follow(job, run_path, launch, lambda line: print(line, flush=True))
    except LaunchError as error:
        return _fail(f"error: {error}", 1)
    except KeyboardInterrupt:
        return _fail(f"stopped following job {job.job_id}; it keeps running (scancel {job.job_id} ends it)", 130)
    result = outcome.result
    print(f"job {job.job_id} completed: {describe_result(result)}"
          + (f", lost {', '.join(result['lost_nodes'])} and went on without them" if result.get("lost_nodes") else ""))
    print(run_path)
    return 0
