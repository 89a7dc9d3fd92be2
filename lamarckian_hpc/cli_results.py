"""The result tables the run commands print: the library returns a run's result, and this turns
it into what a user reads (tables on stdout, a closing line or two on stderr). A training run's
table is here; a population run's is its program's, named by its entry in `config.programs` (next
to the runner that returns the summary it shows), looked up by algorithm name as the library
runs them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from .config.programs import population_program
from .run_result import RunResult


def _train(result: RunResult, out: Console, err: Console) -> None:
    config, summary = result.config, result.summary
    table = Table(title="result", show_header=False)
    table.add_row("env frames", f"{summary.env_frames:,}")
    table.add_row("wall time", f"{summary.wall_time_seconds:.1f} s")
    table.add_row("sampling frames/s", f"{summary.sampling_frames_per_second:,.0f}")
    table.add_row("updates", str(summary.updates))
    table.add_row("episodes", f"{summary.episodes:,}")
    recent = "n/a" if summary.recent_return_mean is None else f"{summary.recent_return_mean:.1f}"
    table.add_row(f"mean return (last {config.stop.return_window} episodes)", recent)
    if config.stop.target_return is not None:
        reached = summary.target_reached_at_frames
        table.add_row(f"target {config.stop.target_return:g}",
                      f"reached at {reached:,} frames" if reached is not None else "not reached")
    out.print(table)


def print_evaluation(evaluation: Any) -> None:
    """`evaluate`'s result (`trained.evaluation.Evaluation`): the mean return and its 95% confidence
    interval, over how many episodes of which checkpoint."""
    returns = evaluation.returns
    table = Table(title="evaluation", show_header=False)
    table.add_row("run", str(evaluation.run))
    table.add_row("checkpoint", f"{evaluation.checkpoint} (policy version {evaluation.policy_version})")
    table.add_row("episodes", f"{len(returns)} of {evaluation.env_id}, seeds {evaluation.seed}.."
                              f"{evaluation.seed + len(returns) - 1}, {'sampled' if evaluation.sampled else 'greedy'} "
                              "actions")
    if evaluation.half_width is None:
        table.add_row("mean return", f"{evaluation.mean_return:.6g} (one episode: no interval)")
    else:
        low, high = evaluation.mean_return - evaluation.half_width, evaluation.mean_return + evaluation.half_width
        table.add_row("mean return", f"{evaluation.mean_return:.6g} ± {evaluation.half_width:.3g} "
                                     f"(95% CI {low:.6g} to {high:.6g})")
    table.add_row("min / max return", f"{min(returns):.6g} / {max(returns):.6g}")
    if evaluation.opponent is not None:
        wins, draws, losses = evaluation.wins_draws_losses
        table.add_row("win rate", f"{wins / len(returns):.2f} against {evaluation.opponent}: {wins} won, "
                                  f"{draws} drawn, {losses} lost")
    table.add_row("mean length", f"{sum(evaluation.lengths) / len(evaluation.lengths):.1f} steps")
    Console().print(table)


Renderer = Callable[[RunResult, Console, Console], None]


def print_result(result: RunResult) -> None:
    """The run's result tables on stdout (and a closing line on stderr where there is one)."""
    renderer: Renderer = (_train if result.workload == "train"
                          else population_program(result.algorithm).load("result_table"))
    renderer(result, Console(), Console(stderr=True))
