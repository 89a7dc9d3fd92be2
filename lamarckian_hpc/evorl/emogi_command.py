"""An evolve run of an EMOGI config: the run file, a line per trained policy and per generation,
a continued run after the last saved generation (`population.command`), and the result,
whose non-dominated policies the `/emogi` group of the run file keeps and the commands print."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ..config.emogi import EMOGIConfig
from ..population.command import population_command
from ..run_result import RunResult
from .emogi import CHECKPOINT_KIND, EMOGIProgram, EMOGIResult, IndividualResult, trajectory_options
from .emogi_store import population_shape, write_results

__all__ = ["CHECKPOINT_KIND", "front_table", "print_emogi_result", "run_emogi"]


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


def run_emogi(config: EMOGIConfig, path: Path, config_file: str | None, resume: bool = False) -> EMOGIResult:
    """Run EMOGI into `path`; with `resume`, continue that run after its last saved generation."""
    program = EMOGIProgram(config, _individual_line(config, Console(stderr=True)))
    population_command(program, config, path, config_file, resume, population_shape(), cannot_resume=program.mismatch,
                       writer_options=trajectory_options(config))
    result = program.result
    write_results(path, result)
    return result


def front_table(emogi: EMOGIResult) -> Table:
    """EMOGI's final non-dominated policies, least active first."""
    table = Table("id", "parents", "w_act", "w_lazy", "score", "wins", "pts", "active", "f1", "f2",
                  title="non-dominated policies (score: normalized score; active: share of steps moved)")
    front = [member for member in emogi.front if member.behaviour is not None]
    for member in sorted(front, key=lambda m: m.behaviour.activeness):
        behaviour = member.behaviour
        parents = ",".join(str(p) for p in member.parent_ids if p >= 0) or "-"
        table.add_row(str(member.id), parents, f"{member.genome[0]:.3f}", f"{member.genome[1]:.3f}",
                      f"{behaviour.normalized_score:.3f}", f"{behaviour.win_rate:.2f}",
                      f"{behaviour.point_difference:+.1f}", f"{behaviour.activeness:.3f}",
                      f"{-member.objectives[0]:.3f}", f"{-member.objectives[1]:.3f}")
    return table


def print_emogi_result(result: RunResult, out: Console, err: Console) -> None:
    """The final non-dominated policies on stdout, and how many policies trained how long on stderr."""
    emogi = result.summary
    out.print(front_table(emogi))
    frames = sum(member.env_frames for member in emogi.history)
    err.print(f"{len(emogi.history)} policies trained on {frames:,} env frames in {emogi.wall_time:.1f} s",
              highlight=False)
