"""The callable a launch submits: every task of the allocation runs it, rank 0 drives the run.

Each task joins the per-job Ray cluster (`ray_cluster.run_on_ray_cluster`); on rank 0, the head,
the driver trains (`train` configs) or evolves (every `evolve` config: NSGA-II, GA, ES, CMA-ES,
PBT+PPO, EMOGI, game balancing and testing, through the library's `lamarckian_hpc.run`, never the
command line) with the config resolved on the submitting machine,
recording into a run file whose path was also fixed there, so that the launcher can follow it and
a requeued job continues the same file. Actors, members and evaluations are Ray actors and tasks
of that cluster, so they run on the CPUs of every node. The job is
`submitit.helpers.Checkpointable`: when Slurm warns it of its time limit (`--signal=USR2@<delay>`),
submitit requeues it, and the next run resumes (see `_train` and `_evolve`, the places where
resuming is decided).
"""

from __future__ import annotations

import os
import secrets
import socket
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import submitit

from ..config import RunConfig
from ..storage.join_folder import JoinFolder, RunContact, join_folder_of
from .ray_cluster import RayClusterInfo, RaySettings, run_on_ray_cluster
from .ray_node import NODE_LOSS_SECONDS
from .slurm_env import SlurmJob


@dataclass(frozen=True)
class RunJobSpec:
    """Everything the job needs, as plain data (submitit stores it in the job folder)."""

    config: dict[str, Any]       # the resolved run config (JSON types)
    config_file: str
    run_path: str                # absolute: the job may start in another directory
    log_dir: str                 # submitit's folder of this job
    ray_object_store_mb: int = 200
    command: str = "train"       # "train" or "evolve": which command's config this is
    actor_job_cpus: int = 0      # CPUs of the actor jobs launched with the run (its messages are sized for them)


class EvolveJobError(RuntimeError):
    """The evolve run on the allocation could not start or did not finish; the message says why."""


def cluster_meta(info: RayClusterInfo, slurm: SlurmJob | None) -> dict[str, Any]:
    """What `/meta` records about where the run ran: hosts, the discovered nodes, the Ray nodes and
    the Slurm job (the layout the run used, flat or its tree, the run adds: `runtime.placement.relay_tree`)."""
    hosts = list(slurm.nodes) if slurm is not None else list(info.labels)
    return {
        "hosts": hosts,
        "cluster_nodes": [asdict(node) for node in info.layout.nodes],
        "ray_nodes": info.node_ids,
        "ray_head_address": info.head_address,
        "slurm_job_id": slurm.job_id if slurm else "",
        "slurm_restart_count": slurm.restart_count if slurm else 0,
        "driver_host": socket.gethostname(),
    }


def _open_to_actor_jobs(join: JoinFolder, info: RayClusterInfo, slurm: SlurmJob | None, run_path: Path) -> None:
    """Tell actor jobs (`lamarckian-hpc join`, a launch's actor jobs) where the cluster is, and its token."""
    join.publish(RunContact(head_address=info.head_address, ray_token=os.environ["RAY_AUTH_TOKEN"],
                            generation=f"{slurm.job_id if slurm else 'local'}.{slurm.restart_count if slurm else 0}."
                                       f"{secrets.token_hex(4)}",
                            learner_job_id=slurm.job_id if slurm else "", run_path=str(run_path),
                            written_at=time.time()))


def _train(spec: RunJobSpec, info: RayClusterInfo) -> dict[str, Any]:
    """Rank 0's driver: resume when a checkpoint exists, else start the run."""
    from ..config import build_config
    from ..runtime.learner.checkpoint import checkpoint_path
    from ..runtime.placement.node_watch import NodeWatch
    from ..runtime.runners.training_run import run_training

    runtime = dict(spec.config.get("runtime", {}))
    runtime["ray_address"] = info.head_address
    if runtime.get("num_actors") is None:  # every CPU of the allocation but the learners' (one core a rank)
        learners = int(runtime.get("learners", 1) or 1)
        runtime["num_actors"] = max(1, sum(node.cores for node in info.layout.nodes) - learners)
    if spec.actor_job_cpus and runtime.get("planned_actors") is None:
        runtime["planned_actors"] = runtime["num_actors"] + spec.actor_job_cpus
    if runtime.get("key_folder") is None:  # beside the run file, which every node of the job can read
        runtime["key_folder"] = str(Path(spec.run_path).with_suffix(".keys"))
    join = JoinFolder(runtime.get("join_folder") or join_folder_of(spec.run_path))
    runtime["join_folder"] = str(join.path)
    config = build_config({**spec.config, "runtime": runtime}, f"{spec.config_file} (launched)")
    slurm = SlurmJob.from_environ()
    run_path = Path(spec.run_path)
    # ---- resume point: a requeued (or restarted) job continues from its last checkpoint ----
    resume = checkpoint_path(run_path).is_file()
    if not resume and run_path.exists() and slurm is not None and slurm.restart_count > 0:
        # Requeued before its first checkpoint: nothing to continue, so the run starts over (the
        # launcher gave this job a path of its own; the rows there belong to updates redone now).
        run_path.unlink()
    meta = cluster_meta(info, slurm)
    if not resume:
        meta["config_file"] = spec.config_file
    print(f"{'resuming' if resume else 'starting'} {run_path} on {len(info.labels)} Ray nodes "
          f"(head {info.head_address})", flush=True)
    # Every node but the head (the driver runs there and is lost with it) is watched.
    watch = NodeWatch(info.node_ids, config.runtime.on_node_loss, head=info.labels[0])
    _open_to_actor_jobs(join, info, slurm, run_path)
    result = run_training(config, run_path, resume=resume, meta=meta, observers=(watch,))
    join.finish()  # not after a failure or a requeue: actor jobs wait for the learner's next start
    return {
        "run_path": str(run_path),
        "command": "train",
        "env_frames": result.env_frames,
        "updates": result.updates,
        "episodes": result.episodes,
        "wall_time_seconds": result.wall_time_seconds,
        "recent_return_mean": result.recent_return_mean,
        "resumed": resume,
        "restart_count": slurm.restart_count if slurm else 0,
        "ray_nodes": len(info.node_ids),
        "hosts": meta["hosts"],
        "lost_nodes": watch.lost,
    }


def _has_checkpoint(run_path: Path) -> bool:
    """Whether an evolve run saved a state to continue from (the population workflow's checkpoint)."""
    from ..runtime.learner.checkpoint import checkpoint_path

    return run_path.is_file() and checkpoint_path(run_path).is_file()


def _evolve(spec: RunJobSpec, info: RayClusterInfo) -> dict[str, Any]:
    """Rank 0's driver of an evolve config: the library's `run`, in this process, whose Ray is
    already the job's cluster. A run file with a checkpoint is continued, so a requeued job picks up
    after its last generation or interval; otherwise the run starts at the path the launcher fixed.
    Workers default to every CPU of the allocation but the driver's."""
    import yaml

    from ..config import ConfigError
    from ..library import run
    from ..run_result import RunFailed

    slurm = SlurmJob.from_environ()
    run_path = Path(spec.run_path)
    runtime = dict(spec.config.get("runtime", {}))
    join = JoinFolder(runtime.get("join_folder") or join_folder_of(run_path))
    overrides = [f"runtime.ray_address={info.head_address}", "runtime.mode=ray", f"runtime.join_folder={join.path}"]
    if runtime.get("num_workers") is None:
        overrides.append(f"runtime.num_workers={max(1, sum(node.cores for node in info.layout.nodes) - 1)}")
    resume = _has_checkpoint(run_path)
    if run_path.is_file() and not resume:
        # Requeued before its first checkpoint was saved: nothing to continue, so it starts over.
        run_path.unlink()
    config_file = None
    if not resume:
        config_file = run_path.with_suffix(".config.yaml")  # the resolved config, as the user can rerun it
        config_file.write_text(yaml.safe_dump(spec.config, sort_keys=False))
        overrides += [f"storage.directory={run_path.parent}", f"storage.run_name={run_path.stem}"]
    hosts = list(slurm.nodes) if slurm is not None else list(info.labels)
    print(f"{'resuming' if resume else 'starting'} {run_path} on {len(info.labels)} Ray nodes "
          f"(head {info.head_address}) with {' '.join(overrides)}", flush=True)
    _open_to_actor_jobs(join, info, slurm, run_path)
    try:
        result = run(config_file, overrides, run_path, resume=run_path if resume else None)
    except (ConfigError, RunFailed) as error:
        print(error, file=sys.stderr, flush=True)
        raise EvolveJobError(f"the evolve run failed: {error}") from None
    join.finish()  # not after a failure or a requeue: actor jobs wait for the driver's next start
    print(f"{result.algorithm} run {'resumed and ' if resume else ''}finished: {result.path}", flush=True)
    return {"run_path": str(run_path), "command": "evolve", "resumed": resume,
            "restart_count": slurm.restart_count if slurm else 0, "ray_nodes": len(info.node_ids), "hosts": hosts}


DRIVERS = {"train": _train, "evolve": _evolve}


class RunJob(submitit.helpers.Checkpointable):
    """Submitted once, run by every task; requeued with the same spec at the time limit
    (`Checkpointable.checkpoint` resubmits the same arguments, and the driver resumes)."""

    def __call__(self, spec: RunJobSpec) -> dict[str, Any] | None:
        os.environ.setdefault("PYTHONUNBUFFERED", "1")
        node_loss = dict(spec.config.get("runtime", {})).get("node_loss_seconds") or NODE_LOSS_SECONDS
        settings = RaySettings(object_store_bytes=spec.ray_object_store_mb * 1024 * 1024,
                               node_loss_seconds=float(node_loss))
        log_dir = spec.log_dir.replace("%j", os.environ.get("SLURM_JOB_ID", "local"))
        driver = DRIVERS[spec.command]
        return run_on_ray_cluster(lambda info: driver(spec, info), settings=settings, log_dir=log_dir,
                                  keep_outcome=keep_job_outcome)


def keep_job_outcome(outcome: dict[str, Any] | BaseException) -> None:
    """Write the driver's result, or its error with its traceback, where submitit writes a returned
    or raised one (its result pickle, as submitit's own worker does), for a rank 0 that MPI keeps
    from returning: the launcher then reports the run's end instead of a job without a result."""
    if isinstance(outcome, BaseException):
        kept = ("error", "".join(traceback.format_exception(type(outcome), outcome, outcome.__traceback__)))
    else:
        kept = ("success", outcome)
    # The job is a Slurm one: submitit's generic JobEnvironment would look its plugins up through
    # pkg_resources (submitit 1.5.0), which recent setuptools no longer ship.
    paths = submitit.slurm.slurm.SlurmJobEnvironment().paths
    with submitit.core.utils.temporary_save_path(paths.result_pickle) as path:
        submitit.core.utils.cloudpickle_dump(kept, path)


def describe_result(result: dict[str, Any]) -> str:
    """The job's result in a few words, for the launcher's last line and the job log."""
    if result.get("command") == "evolve":
        return (f"evolve {'resumed' if result.get('resumed') else 'ran'} on {result.get('ray_nodes', 0)} Ray nodes, "
                f"requeued {result.get('restart_count', 0)} times")
    return (f"{result.get('env_frames', 0):,} frames, {result.get('updates', 0)} updates, "
            f"{result.get('ray_nodes', 0)} Ray nodes, requeued {result.get('restart_count', 0)} times")


def main(argv: list[str] | None = None) -> int:
    """Every task of a plain `sbatch` job runs this (see slurm/run.sbatch): Ray over the
    allocation, and on rank 0 the run (train or evolve, as the config says), resumed when it can be."""
    import argparse

    from ..config import ConfigError, load_config
    from ..config.evorl import config_model

    parser = argparse.ArgumentParser(description="One bootstrap task of a train or evolve job on Slurm.")
    parser.add_argument("config", help="YAML config file")
    parser.add_argument("overrides", nargs="*", metavar="key.path=value")
    parser.add_argument("--run-file", required=True, help="the run's HDF5 file (fixed, so that a requeue continues it)")
    parser.add_argument("--log-dir", default=".", help="where the Ray nodes' logs go")
    parser.add_argument("--object-store-mb", type=int, default=200)
    args = parser.parse_args(argv)
    model = config_model(args.config, args.overrides)
    try:
        config = load_config(args.config, args.overrides, model)
    except ConfigError as error:
        print(error, file=sys.stderr)
        return 2
    run_file = Path(args.run_file).resolve()
    run_file.parent.mkdir(parents=True, exist_ok=True)
    spec = RunJobSpec(config=config.to_json_dict(), config_file=args.config, run_path=str(run_file),
                      log_dir=str(Path(args.log_dir).resolve()), ray_object_store_mb=args.object_store_mb,
                      command="train" if model is RunConfig else "evolve")
    result = RunJob()(spec)
    if result is not None:
        print(f"run file {result['run_path']}: {describe_result(result)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
