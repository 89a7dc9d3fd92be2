"""An evolve run of an EMOGI config: the run file, a line per trained policy and per generation,
a continued run after the last saved generation (`population.command`), and the result,
whose non-dominated policies the `/emogi` group of the run file keeps."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from rich.console import Console

from ..config.emogi import EMOGIConfig
from ..population.command import population_command
from .emogi import CHECKPOINT_KIND, EMOGIProgram, EMOGIResult, IndividualResult, trajectory_options
from .emogi_store import population_shape, write_results

__all__ = ["CHECKPOINT_KIND", "run_emogi"]


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
