"""The library under the commands: `run` takes any config (a YAML file, a mapping or a validated
config) to a run file and returns its result.

The commands (`run`, `train`, `evolve`, `league`) parse their arguments, call `prepare` and
`execute` and print what comes back; the Slurm job (`cluster.job`) and scripts call `run`. So a run
started from Python goes the same way as one started from a shell, and nothing here prints a
result or decides an exit: a bad config is a `ConfigError`, a run that cannot start or does not
finish is a `RunFailed`, both with one line for the user. Heavy parts (torch, Ray, h5py) are
imported only once the config is known to be good, so a typo costs a second, not a Ray start.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import ConfigError, RootSection, apply_overrides
from .config.loading import read_config_file
from .config.programs import population_program
from .config.workload import command_config_model, workload_of
from .run_result import CANNOT_START, FAILED, INTERRUPTED, RunFailed, RunResult

#: What `run` accepts as a config: a YAML file, a config tree, a validated config, or None (the defaults).
ConfigSource = str | Path | Mapping[str, Any] | RootSection | None


@dataclass(frozen=True)
class PreparedRun:
    """A config validated for a run, and where the run goes: the step a command takes before it
    starts anything, so that it can set up its progress display for the workload."""

    config: Any                  # the validated root config (RunConfig, EvolveConfig, PBTConfig, ...)
    workload: str                # train, evolve or league
    path: Path                   # the run file
    config_file: str | None      # the YAML file it came from, recorded in the run file's meta
    resume: bool = False
    checkpoint: str = "last"     # which checkpoint a resumed training run continues from: last, best or a file
    force: bool = False          # a resumed training run may continue from a checkpoint older than its newest


def run_path_for(config: Any, config_file: str | Path | None) -> Path:
    """storage.directory / <run_name>.h5; the default name says which config, when and which seed."""
    name = config.storage.run_name
    if name is None:
        stem = Path(config_file).stem if config_file else "run"
        name = f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}-s{config.seed}"
    path = config.storage.directory / f"{name}.h5"
    suffix = 1
    while path.exists():
        suffix += 1
        path = config.storage.directory / f"{name}-{suffix}.h5"
    return path


def unreadable_run_file(path: Path, error: BaseException) -> str:
    """One line for a run file that cannot be read; the reader's own errors already name the file."""
    from .storage import RunFileReadError

    return f"error: {error}" if isinstance(error, RunFileReadError) else f"error: {path} is not a readable run file: {error}"


def _stored_tree(run: Path) -> dict[str, Any]:
    """The config a run file stored, to continue that run with."""
    from .storage import open_run

    if not run.is_file():
        raise ConfigError(f"error: no such run file to resume: {run}")
    try:
        with open_run(run) as reader:
            tree = reader.config
    except (OSError, KeyError, ValueError) as error:
        raise ConfigError(unreadable_run_file(run, error)) from None
    return tree if isinstance(tree, dict) else {}


def prepare(config: ConfigSource = None, overrides: Sequence[str] = (), output: str | Path | None = None, *,
            resume: str | Path | None = None, command: str = "run", checkpoint: str | Path = "last",
            force: bool = False) -> PreparedRun:
    """Validate a config with `key.path=value` overrides and fix its run file: `output`, or
    storage.directory/<run name>.h5. With `resume` (a run file), the config that run stored is
    continued instead and `config` is not used; a training run continues from `checkpoint` (last,
    best or a checkpoint file), one older than the run's newest only with `force` (`--force`).
    `command` (train, evolve or league) refuses a config of another workload with a ConfigError
    naming the command that runs it; "run" takes any."""
    config_file: str | None = None
    if resume is not None:
        source = f"{resume} (resumed)"
        tree = _stored_tree(Path(resume))
    elif isinstance(config, RootSection):
        source, tree = "config", config.to_json_dict()
    elif isinstance(config, Mapping):
        source, tree = "config", copy.deepcopy(dict(config))
    elif config is None:
        source, tree = "defaults", {}
    else:
        config_file = source = str(config)
        tree = read_config_file(config)
    named = str(resume) if resume is not None else source
    model = command_config_model(command, tree, overrides, named, resume is not None)
    validated = apply_overrides(tree, list(overrides), source, model)
    if resume is not None:
        path = Path(resume)
    elif output is not None:
        path = Path(output)
    else:
        path = run_path_for(validated, config_file)
    workload = workload_of(model)
    if str(checkpoint) != "last" and (resume is None or workload != "train"):
        raise ConfigError("error: --checkpoint chooses where a training run resumes: it needs --resume RUN of a "
                          "train run (population runs continue from their last checkpoint)")
    if force and (resume is None or workload != "train"):
        raise ConfigError("error: --force lets a resumed training run continue from a checkpoint older than its "
                          "newest: it needs --resume RUN of a train run")
    return PreparedRun(validated, workload, path, config_file, resume is not None, str(checkpoint), force)


def _train(prepared: PreparedRun, observers: tuple[Any, ...], meta: Mapping[str, Any] | None,
           on_start: Callable[[Path], None] | None) -> Any:
    """A training run's TrainResult; its failures as RunFailed lines that say where the metrics are."""
    from .mdp import EnvironmentFailingError
    from .runtime.learner.actor_watch import RunStalledError
    from .runtime.placement.node_watch import NodeLostError
    from .runtime.runners.training_run import TrainingSetupError, run_training
    from .storage import StorageFullError

    path = prepared.path
    if meta is None and not prepared.resume:
        meta = {"config_file": str(prepared.config_file)}
    try:
        return run_training(prepared.config, path, resume=prepared.resume, checkpoint=prepared.checkpoint,
                            force=prepared.force, meta=meta, observers=observers, on_start=on_start)
    except KeyboardInterrupt:
        raise RunFailed(f"interrupted; metrics up to now are in {path}; continue with: "
                        f"lamarckian-hpc train --resume {path}", INTERRUPTED) from None
    except TrainingSetupError as error:
        raise RunFailed(f"error: {error}", CANNOT_START) from None
    except (RunStalledError, EnvironmentFailingError) as error:
        raise RunFailed(f"error: {error}; the metrics up to now are in {path}", FAILED) from None
    except NodeLostError as error:  # a node or a learner rank: the learner was saved first
        raise RunFailed(f"error: {error}; checkpoint saved, continue with: lamarckian-hpc train --resume {path}",
                        FAILED) from None
    except StorageFullError as error:  # resuming is offered only where there is a run to resume
        hint = f"; continue later with: lamarckian-hpc train --resume {path}" if path.is_file() else ""
        raise RunFailed(f"error: {error}{hint}", FAILED) from None


def _populate(prepared: PreparedRun) -> Any:
    """A population run's summary, from the runner of the program its algorithm names."""
    runner = population_program(prepared.config.algorithm.name).load("runner")
    return runner(prepared.config, prepared.path, prepared.config_file, prepared.resume)


def execute(prepared: PreparedRun, *, observers: Sequence[Any] = (), meta: Mapping[str, Any] | None = None,
            on_start: Callable[[Path], None] | None = None) -> RunResult:
    """Run a prepared config to its run file. `observers` (a training run's: progress, node watch)
    see every update, `meta` replaces what a training run records in `/meta` about where it ran,
    and `on_start` hears the run file's path once it exists; a population run reports its own
    progress lines on stderr. RunFailed when the run cannot start or does not finish."""
    if not prepared.resume and prepared.path.exists():
        raise RunFailed(f"error: {prepared.path} exists; give another output, or continue it with "
                        f"lamarckian-hpc {prepared.workload} --resume {prepared.path}", CANNOT_START)
    if prepared.workload == "train":
        summary = _train(prepared, tuple(observers), meta, on_start)
    else:
        summary = _populate(prepared)
    return RunResult(prepared.path, prepared.workload, prepared.config.algorithm.name, prepared.config, summary,
                     prepared.resume)


def run(config: ConfigSource = None, overrides: Sequence[str] = (), output: str | Path | None = None, *,
        resume: str | Path | None = None, checkpoint: str | Path = "last", force: bool = False,
        observers: Sequence[Any] = (), meta: Mapping[str, Any] | None = None) -> RunResult:
    """Run any config (train, evolve or league: the config says which) to a run file and return its
    result; `lamarckian-hpc run CONFIG [overrides]` from Python. ConfigError for a bad config,
    RunFailed for a run that cannot start or does not finish; see `prepare` and `execute`."""
    return execute(prepare(config, overrides, output, resume=resume, checkpoint=checkpoint, force=force),
                   observers=observers, meta=meta)


def evaluate(run: str | Path, checkpoint: str | Path = "last", episodes: int = 10, seed: int = 0, *,
             sample: bool = False, record: str | Path | None = None, member: int | None = None,
             learner: str | None = None, opponent: str | None = None) -> Any:
    """Play the policy of training run `run` from `checkpoint` (last, best or a file), of member
    `member` of a PBT run, or of league learner `learner` against the scripted player (or against
    learner `opponent`), for `episodes` episodes (`trained.evaluation`: greedy unless `sample`;
    episode k seeded `seed + k`; the played episodes written to `record`); RunFailed with one line
    when there is nothing to play."""
    from .storage import StorageFullError
    from .trained.evaluation import evaluate_policy
    from .trained.policy import TrainedPolicyError, load_trained_policy

    if episodes < 1:
        raise RunFailed(f"error: --episodes must be at least 1, got {episodes}", CANNOT_START)
    if record is not None and Path(record).exists():
        raise RunFailed(f"error: {record} exists; choose another file to record the episodes in", CANNOT_START)
    if (member is not None or learner is not None) and str(checkpoint) != "last":
        raise RunFailed("error: --member and --learner play a population as the run last saved it; --checkpoint "
                        "applies to training runs", CANNOT_START)
    if member is not None and learner is not None:
        raise RunFailed("error: give --member (a PBT run) or --learner (a league run), not both", CANNOT_START)
    if opponent is not None and learner is None:
        raise RunFailed("error: --opponent names the league learner that plays against --learner; give --learner",
                        CANNOT_START)
    make_env, against = None, None
    try:
        if member is not None:
            from .evorl.trained_members import load_pbt_member

            policy = load_pbt_member(run, member)
        elif learner is not None:
            from .evorl.trained_members import load_league_learner

            policy, against, make_env = load_league_learner(run, learner, opponent)
        else:
            policy = load_trained_policy(run, checkpoint)
    except TrainedPolicyError as error:
        raise RunFailed(f"error: {error}", CANNOT_START) from None
    try:
        return evaluate_policy(policy, Path(run), episodes, seed, sample=sample, record=record, opponent=against,
                               make_env=make_env)
    except StorageFullError as error:
        raise RunFailed(f"error: {error}", FAILED) from None
