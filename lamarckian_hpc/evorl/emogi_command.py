"""`lamarckian-hpc evolve` for an EMOGI config: the run file, a line per generation, and a table of
the non-dominated policies' behaviour. Every generation's state (NSGA-II, the policies' weights, the
history) is saved beside the run file, so that `evolve --resume` continues after the last one."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.table import Table

from ..config.emogi import EMOGIConfig
from ..runtime.checkpoint import checkpoint_path, save_run_state
from ..runtime.resumable_run import load_resume_state, run_closing
from ..storage import MEGABYTE, RunWriter, continue_run_file
from .emogi import EMOGIResult, IndividualResult, result_of, run_emogi
from .emogi_store import METRIC_NAMES, EMOGIRecorder, population_shape, write_results

#: The `kind` of an EMOGI run's checkpoint (`runtime.checkpoint.save_run_state`).
CHECKPOINT_KIND = "emogi"


def front_table(result: EMOGIResult) -> Table:
    """The final non-dominated policies, least active first."""
    table = Table("id", "parents", "w_act", "w_lazy", "score", "wins", "pts", "active", "f1", "f2",
                  title="non-dominated policies (score: normalized score; active: share of steps moved)")
    front = [member for member in result.front if member.behaviour is not None]
    for member in sorted(front, key=lambda m: m.behaviour.activeness):  # type: ignore[union-attr]
        behaviour = member.behaviour
        assert behaviour is not None
        parents = ",".join(str(p) for p in member.parent_ids if p >= 0) or "-"
        table.add_row(str(member.id), parents, f"{member.genome[0]:.3f}", f"{member.genome[1]:.3f}",
                      f"{behaviour.normalized_score:.3f}", f"{behaviour.win_rate:.2f}",
                      f"{behaviour.point_difference:+.1f}", f"{behaviour.activeness:.3f}",
                      f"{-member.objectives[0]:.3f}", f"{-member.objectives[1]:.3f}")
    return table


def _individual_line(config: EMOGIConfig, console: Console) -> Callable[[int, int, IndividualResult | None], None]:
    """A progress line per trained policy (a generation of PPO trainings takes minutes)."""
    size = config.algorithm.population_size

    def report(generation: int, index: int, result: IndividualResult | None) -> None:
        where = f"  gen {generation + 1} policy {index + 1}/{size}:"
        if result is None:
            console.print(f"{where} training failed", highlight=False)
            return
        behaviour = result.behaviour
        console.print(f"{where} score {behaviour.normalized_score:.2f} wins {behaviour.win_rate:.2f} "
                      f"active {behaviour.activeness:.2f}, {result.env_frames:,} frames, {result.wall_time:.0f}s",
                      highlight=False)

    return report


def emogi_command(config: EMOGIConfig, path: Path, config_file: str | None, resume: bool = False) -> int:
    """Run EMOGI into `path`; with `resume`, continue that run after its last saved generation."""
    console = Console(stderr=True)
    state = None
    if resume:
        state = load_resume_state(path, CHECKPOINT_KIND)
        if state is None:
            return 2
        done = int(state["generations"])
        saved_size = len(state["population_ids"])
        if saved_size != config.algorithm.population_size:
            print(f"error: {path} cannot be resumed: algorithm.population_size is {config.algorithm.population_size}, "
                  f"the saved run's population has {saved_size}", file=sys.stderr)
            return 2
        if done >= config.algorithm.generations:
            print(f"error: {path} has nothing left to do (all algorithm.generations={config.algorithm.generations} "
                  "are done); resume it with a larger budget", file=sys.stderr)
            return 2
        # Rows of a generation after the checkpoint are dropped: the resumed run evaluates it again.
        writer = continue_run_file(path, METRIC_NAMES, done - 1)
        console.print(f"resuming {path} after generation {done}", highlight=False)
    else:
        writer = RunWriter(path, config.to_json_dict(), METRIC_NAMES, meta={"config_file": str(config_file)},
                           population_shape=population_shape())  # type: ignore[arg-type]
        console.print(f"run file: {path}", highlight=False)
    recorder = EMOGIRecorder(writer, config, lambda line: console.print(line, highlight=False))
    if state is not None:
        recorder.continue_from(result_of(state))
    reserve = int(config.storage.min_free_megabytes * MEGABYTE)

    def save(run_state: dict) -> None:  # after the recorder flushed the generation's rows
        save_run_state(checkpoint_path(path), CHECKPOINT_KIND, run_state, reserve)

    result = run_closing(writer, path, lambda: run_emogi(config, recorder, on_individual=_individual_line(config, console),
                                                         on_state=save, resume=state),
                         interrupted_after="generation")
    if isinstance(result, int):
        return result
    write_results(path, result)
    Console().print(front_table(result))
    frames = sum(member.env_frames for member in result.history)
    console.print(f"{len(result.history)} policies trained on {frames:,} env frames in {result.wall_time:.1f} s",
                  highlight=False)
    print(path)
    return 0
