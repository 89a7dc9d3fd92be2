"""`lamarckian-hpc evolve` for a PBT config: the run file, a line per interval, a result table."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table

from ..config import PBTConfig
from ..storage import RunWriter
from .pbt_ppo import METRIC_NAMES, population_shape, progress_line, run_pbt


def pbt_command(config: PBTConfig, path: Path, config_file: str | None) -> int:
    console = Console(stderr=True)
    writer = RunWriter(path, config.to_json_dict(), METRIC_NAMES, meta={"config_file": str(config_file)},
                       population_shape=population_shape(config))  # type: ignore[arg-type]
    console.print(f"run file: {path}", highlight=False)
    names = tuple(config.algorithm.hyperparameters)
    try:
        result = run_pbt(config, writer, lambda report: console.print(progress_line(report, names), highlight=False, soft_wrap=True))
    except KeyboardInterrupt:
        writer.close(completed=False)
        console.print(f"interrupted; the population history up to now is in {path}")
        return 130
    except BaseException:
        writer.close(completed=False)
        raise
    writer.close()
    table = Table(title="result", show_header=False)
    table.add_row("population", str(config.algorithm.population_size))
    table.add_row("intervals", str(result.intervals))
    table.add_row("env frames (all members)", f"{result.env_frames:,}")
    table.add_row("wall time", f"{result.wall_time_seconds:.1f} s")
    table.add_row("best member", f"id {result.best_id}, mean return {result.best_return:.1f}")
    if config.stop.target_return is not None:
        first = result.first_reached_seconds
        table.add_row(f"target {config.stop.target_return:g}",
                      f"first reached after {first:.1f} s" if first is not None else "not reached")
    Console().print(table)
    print(path)
    return 0
