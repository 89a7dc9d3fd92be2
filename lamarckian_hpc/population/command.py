"""What the library does around every population run, whatever its algorithm: open the run file
(or, for a resumed run, continue it after the checkpoint's last generation, once the saved state is
known to fit the config), run the workflow, and close the file on every way out, so that an
interrupt or a full disk ends in a `RunFailed` whose one line says how to continue, and leaves a
file that `evolve --resume` picks up. Progress lines go to `report` (stderr by default); the result
is returned, for the caller to print."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console

from ..run_result import CANNOT_START, FAILED, INTERRUPTED, RunFailed
from ..runtime.learner.checkpoint import checkpoint_path, load_run_state
from ..runtime.sinks.configured import build_sinks
from ..storage import MEGABYTE, RunWriter, StorageFullError, continue_run_file
from .workflow import Checkpointing, PopulationProgram, PopulationRuntime, run_population

T = TypeVar("T")


def load_resume_state(path: Path, kind: str) -> dict[str, Any]:
    """The state saved beside `path` by a run of `kind`; RunFailed with the reason it cannot be read
    (missing, damaged, another algorithm's)."""
    try:
        return load_run_state(checkpoint_path(path), kind)
    except ValueError as error:
        raise RunFailed(f"error: {error}", CANNOT_START) from None


def run_closing(writer: RunWriter, path: Path, body: Callable[[], T], interrupted_after: str | None = None) -> T:
    """`body()`'s result after closing `writer` as completed; after closing it as incomplete,
    RunFailed for a full disk, and for Ctrl-C when `interrupted_after` names what the run saves (an
    interval, a generation); any other error propagates."""
    hint = f"lamarckian-hpc evolve --resume {path}"
    try:
        result = body()
    except KeyboardInterrupt:
        writer.close(completed=False)
        if interrupted_after is None:
            raise
        raise RunFailed(f"interrupted; the run up to its last saved {interrupted_after} is in {path}; "
                        f"continue with: {hint}", INTERRUPTED) from None
    except StorageFullError as error:
        writer.close(completed=False)
        raise RunFailed(f"error: {error}; continue later with: {hint}", FAILED) from None
    except BaseException:
        writer.close(completed=False)
        raise
    writer.close()
    return result


@dataclass(frozen=True)
class PopulationRun:
    """A finished population command: its wall time, and after which generation (0-based, as the
    run file counts them) it resumed, None for a fresh run."""

    wall_seconds: float
    resumed_after: int | None = None


def population_command(program: PopulationProgram, config: Any, path: Path, config_file: str | None, resume: bool,
                       population_shape: tuple | None, unit: str = "generation",
                       cannot_resume: Callable[[dict[str, Any]], str | None] = lambda state: None,
                       report: Callable[[str], None] | None = None, writer_class: type[RunWriter] = RunWriter,
                       writer_options: dict[str, Any] | None = None) -> PopulationRun:
    """Run `program` into `path` (with `resume`, continue that run); the finished run, or RunFailed
    for a run that could not start or did not finish.

    `cannot_resume(state)` says why a saved run does not fit `config` (another population size,
    another search space), or None; a run whose budget is spent is refused too. `writer_class` and
    `writer_options` make a run file with more groups (a league's)."""
    console = Console(stderr=True)
    reserve = int(config.storage.min_free_megabytes * MEGABYTE)
    state = None
    if resume:
        state = load_resume_state(path, program.kind)
        problem = cannot_resume(state)
        if problem is not None:
            raise RunFailed(f"error: {path} cannot be resumed: {problem}", CANNOT_START)
        program.load_state_dict(state["program"])
        finished = program.finished_reason()
        if finished is not None:
            raise RunFailed(f"error: {path} has nothing left to do ({finished}); resume it with a larger budget",
                            CANNOT_START)
        # Rows of a generation after the checkpoint are dropped: the resumed run does it again.
        done = int(state["generation"])
    try:
        if state is not None:
            writer = continue_run_file(path, program.metric_names, done - 1, min_free_bytes=reserve,
                                       writer_class=writer_class, **(writer_options or {}))
            console.print(f"resuming {path} after {unit} {done - 1}", highlight=False)
        else:
            writer = writer_class(path, config.to_json_dict(), program.metric_names,
                                  meta={"config_file": str(config_file)}, population_shape=population_shape,
                                  min_free_bytes=reserve, **(writer_options or {}))
            console.print(f"run file: {path}", highlight=False)
    except StorageFullError as error:
        raise RunFailed(f"error: {error}", FAILED) from None
    checkpointing = Checkpointing(checkpoint_path(path), config.storage.checkpoint_interval_seconds, reserve)
    resumed_after = None if state is None else done - 1
    genome_names = population_shape[2] if population_shape is not None and len(population_shape) > 2 else ()
    sinks = build_sinks(config, path, resumed=state is not None, genome_names=genome_names)
    try:
        return run_closing(writer, path, lambda: PopulationRun(run_population(
            program, PopulationRuntime.of(config.runtime), writer, checkpointing, state,
            report or (lambda line: console.print(line, highlight=False, soft_wrap=True)),
            observers=tuple(sinks)), resumed_after), interrupted_after=unit)
    finally:
        for sink in sinks:
            sink.close()
