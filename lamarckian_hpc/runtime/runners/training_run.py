"""One training run from config to closed run file: the trainer, its run file, its checkpoints.

The command line, the Slurm job and tests all start training here, so that a run started by
`lamarckian-hpc train`, one requeued by Slurm and one resumed with `--resume` write their files
the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ...config import RunConfig
from ...storage import MEGABYTE, RunWriter, continue_run_file
from ..algorithms import rl_algorithm
from ..learner.checkpoint import (
    Checkpointer,
    CheckpointMismatch,
    TrainingCheckpoint,
    check_fits,
    load_checkpoint,
    newer_checkpoints,
    resolve_checkpoint,
)
from ..observers import TrainObserver, TrainResult
from ..placement.node_watch import NodeLostError
from ..run_shape import POLICY_ID
from ..sinks.base import MetricSink
from ..sinks.configured import build_sinks
from .recording import MetricsRecorder, trajectory_writer_options

log = logging.getLogger(__name__)


class TrainingSetupError(ValueError):
    """The run cannot start as asked (no checkpoint to resume, an impossible runtime choice); one line."""


def make_trainer(config: RunConfig) -> Any:
    """The serial or distributed trainer the config asks for (ValueError for impossible combinations)."""
    if config.runtime.mode == "serial":
        from .trainer import SerialTrainer

        return SerialTrainer(config)
    from ..placement.ray_setup import ray_cpus, shutdown_unclaimed_ray, start_ray_while_importing
    from ..run_shape import probe_environment

    # The environment is made once before Ray starts, so that an id or keyword it refuses is one
    # line within a second, not after Ray's start-up (and its shutdown); the same one is timed for
    # the size of the messages.
    probe = probe_environment(config) if config.multiagent is None else None
    if config.runtime.device == "cuda":  # likewise a GPU that is not there (this imports torch first)
        from ...rl.device import choose_device

        choose_device("cuda")
    start_ray_while_importing(config.runtime.ray_address, ray_cpus(config.runtime.num_actors))
    from .distributed import DistributedTrainer

    try:
        return DistributedTrainer(config, probe=probe)
    except BaseException:
        shutdown_unclaimed_ray()
        raise


def metric_names_for(config: RunConfig) -> tuple[str, ...]:
    """Every metric the run writes: its algorithm's, the distributed runtime's own, and a
    multi-agent run's per-policy ones."""
    names = rl_algorithm(config).metric_names
    if config.runtime.mode != "serial":
        from .distributed import RUNTIME_METRICS

        names = (*names, *RUNTIME_METRICS)
    if config.multiagent is not None:
        from ..learner.policy_learners import multiagent_metric_names

        names = (*names, *multiagent_metric_names(config))
    return names


def _resumed(run_path: Path, checkpoint: str | Path, force: bool) -> tuple[Path, TrainingCheckpoint]:
    """The checkpoint a resumed run continues from, and its file. One older than the run's newest is
    refused unless `force`: the resume drops the run file's rows past it at once and the newer
    checkpoints at its first save (`Checkpointer`), which a mistyped `--checkpoint` should not cost."""
    source = resolve_checkpoint(run_path, checkpoint)
    saved = load_checkpoint(source)
    newer = newer_checkpoints(run_path, saved.policy_version)
    if newer and not force:
        path, version = list(newer.items())[-1]
        versions = ", ".join(str(kept) for kept in sorted(set(newer.values())))
        raise TrainingSetupError(
            f"checkpoint {source} (policy version {saved.policy_version}) is older than the run's newest, {path} "
            f"(policy version {version}); resuming from it drops the run file's rows after version "
            f"{saved.policy_version} and, at its first save, the checkpoints of policy versions {versions}: "
            "give --force to resume from it anyway")
    return source, saved


def run_training(config: RunConfig, run_path: str | Path, *, resume: bool = False,
                 checkpoint: str | Path = "last", force: bool = False, meta: Mapping[str, Any] | None = None,
                 observers: tuple[TrainObserver, ...] = (),
                 on_start: Callable[[Path], None] | None = None) -> TrainResult:
    """Train, recording metrics to `run_path` and checkpoints beside it.

    With `resume`, training continues from a checkpoint of the run (`checkpoint`: "last", the newest
    beside `run_path`; "best", the best one kept; or a checkpoint file), and the run file keeps
    exactly the rows up to that checkpoint. One older than the run's newest needs `force`
    (`_resumed`), and one that does not fit the learner this config builds is refused
    (`check_fits`), both with one TrainingSetupError line and the run's files untouched. The file
    is closed as completed only when training ends normally; an exception or Ctrl-C leaves it
    marked incomplete, and resumable.
    """
    run_path = Path(run_path)
    try:
        source, saved = _resumed(run_path, checkpoint, force) if resume else (None, None)
        trainer = make_trainer(config)
    except ValueError as error:
        raise TrainingSetupError(str(error)) from None
    sinks: list[MetricSink] = []
    try:
        layout = getattr(trainer, "tree", None)
        meta = {**(meta or {}), **(layout.meta() if layout is not None else {"broadcast_layout": "serial"})}
        if getattr(trainer, "message_steps", None) is not None:  # what the run decided (`run_shape.with_message_ticks`)
            meta["message_steps"] = trainer.message_steps
            meta["credit_budget"] = trainer.credit_budget
        learner = getattr(trainer, "learner", None)
        if getattr(learner, "device_reason", None) is not None:  # runtime.device, as the learner chose it
            meta["learner_device"] = f"{learner.device}: {learner.device_reason}"
        names = metric_names_for(config)
        reserve = int(config.storage.min_free_megabytes * MEGABYTE)
        options = trajectory_writer_options(config, trainer.spaces, *(config.multiagent.trained if config.multiagent
                                                                      else (POLICY_ID,)))
        if saved is not None:
            try:  # every runtime's learner (serial, distributed, multi-agent); learner ranks get rank 0's state
                check_fits(source, saved.learner, trainer.learner.state_dict())
            except CheckpointMismatch as error:
                raise TrainingSetupError(str(error)) from None
            trainer.restore(saved)
            writer = continue_run_file(run_path, names, saved.policy_version, meta, min_free_bytes=reserve,
                                       through_env_frames=saved.env_frames, **options)
            log.info("resumed %s at policy version %d, %d frames", run_path, saved.policy_version,
                     saved.env_frames)
        else:
            writer = RunWriter(run_path, config.to_json_dict(), names, meta=meta, min_free_bytes=reserve, **options)
        if on_start is not None:
            on_start(run_path)
        recorder = MetricsRecorder(writer, config.storage.metrics_interval_seconds)
        storage = config.storage
        checkpointer = Checkpointer(trainer, writer, run_path, storage.checkpoint_interval_seconds, reserve,
                                    keep_last=storage.keep_last_checkpoints, keep_best=storage.keep_best_checkpoint,
                                    resumed_from=saved.policy_version if saved is not None else None)
        # The checkpointer follows the recorder: it flushes the rows the checkpoint covers.
        trainer.observers += [recorder, checkpointer, *observers]
        sinks = build_sinks(config, run_path, resumed=saved is not None)
        trainer.observers += sinks
        try:
            result = trainer.train()  # the recorder closes the file as completed when training ends
        except NodeLostError:
            # The learner lives on the head and is whole: save it, so that a resume redoes nothing.
            checkpointer.save()
            writer.close(completed=False)
            raise
        except BaseException:
            writer.close(completed=False)
            raise
    finally:
        for sink in sinks:  # a run that failed keeps the metrics of its last updates too
            sink.close()
        trainer.close()
    return result
