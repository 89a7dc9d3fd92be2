"""The result tables the run commands print: the library returns a run's result, and this is the
one place that turns each algorithm's result into what a user reads (tables on stdout, a closing
line or two on stderr). Looked up by workload and algorithm name, as the library runs them."""

from __future__ import annotations

from typing import Any, Callable

from rich.console import Console
from rich.table import Table

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


def _evolution(result: RunResult, out: Console, err: Console) -> None:
    config, summary = result.config, result.summary
    table = Table(title="result", show_header=False)
    table.add_row("problem", summary.problem)
    table.add_row("algorithm", config.algorithm.name)
    table.add_row("generations", str(config.algorithm.generations))
    if summary.resumed_after is not None:
        table.add_row("resumed after generation", str(summary.resumed_after))
    for label, value in summary.rows:
        table.add_row(label, value)
    table.add_row("wall time", f"{summary.wall_seconds:.1f} s")
    out.print(table)
    if summary.balance is not None:  # the lineups the game's designers should weaken
        from .games.report import print_summary

        print_summary(summary.balance, out)


def _pbt(result: RunResult, out: Console, err: Console) -> None:
    config, summary = result.config, result.summary
    table = Table(title="result", show_header=False)
    table.add_row("population", str(config.algorithm.population_size))
    table.add_row("intervals", str(summary.intervals))
    table.add_row("env frames (all members)", f"{summary.env_frames:,}")
    table.add_row("wall time", f"{summary.wall_time_seconds:.1f} s")
    table.add_row("best member", f"id {summary.best_id}, mean return {summary.best_return:.1f}")
    if config.stop.target_return is not None:
        first = summary.first_reached_seconds
        table.add_row(f"target {config.stop.target_return:g}",
                      f"first reached after {first:.1f} s" if first is not None else "not reached")
    out.print(table)


def front_table(emogi: Any) -> Table:
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


def _emogi(result: RunResult, out: Console, err: Console) -> None:
    emogi = result.summary
    out.print(front_table(emogi))
    frames = sum(member.env_frames for member in emogi.history)
    err.print(f"{len(emogi.history)} policies trained on {frames:,} env frames in {emogi.wall_time:.1f} s",
              highlight=False)


def _league(result: RunResult, out: Console, err: Console) -> None:
    summary = result.summary
    table = Table("learner", "Elo", "win rate vs its targets", "updates since snapshot",
                  title=f"league after {summary.generations} generations ({summary.wall_seconds:.0f} s, "
                        f"{summary.members} members, {summary.snapshots} snapshots)")
    for learner in summary.learners:
        table.add_row(learner.name, f"{learner.elo:.0f}", "-" if learner.win_rate is None else f"{learner.win_rate:.2f}",
                      str(learner.updates))
    out.print(table)
    if summary.scripted:
        first, last = summary.scripted
        err.print(f"main agents against the scripted player: {first[1]:+.2f} after generation "
                  f"{first[0] + 1}, {last[1]:+.2f} after generation {last[0] + 1}", highlight=False)


def _game_testing(result: RunResult, out: Console, err: Console) -> None:
    summary = result.summary
    found, baseline = summary.found, summary.baseline
    table = Table("symptom", "search: found at episode", "random play: found at episode", "actions", "detail",
                  title=f"bugs found in {found.episodes} episodes ({summary.search_seconds:.1f} s)")
    symptoms = list(found.bugs) + [name for name in (baseline.bugs if baseline else {}) if name not in found.bugs]
    for symptom in symptoms:
        mine, theirs = found.bugs.get(symptom), baseline.bugs.get(symptom) if baseline else None
        shown = mine or theirs
        table.add_row(symptom, str(mine.episode) if mine else "-",
                      str(theirs.episode) if theirs else ("-" if baseline else "not run"),
                      str(len(shown.actions)), shown.detail)
    out.print(table)
    states = f"; random play {len(baseline.bugs)} bugs, {baseline.distinct_states} states" if baseline else ""
    err.print(f"search: {len(found.bugs)} bugs, {found.distinct_states} distinct states{states}; "
              f"reports with seed and actions: {summary.bugs_file}", highlight=False)


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
#: algorithm.name of a population run -> its renderer (others: an EC run's); a training run: _train.
RENDERERS: dict[str, Renderer] = {"pbt": _pbt, "emogi": _emogi, "league": _league, "wuji": _game_testing}


def print_result(result: RunResult) -> None:
    """The run's result tables on stdout (and a closing line on stderr where there is one)."""
    renderer = _train if result.workload == "train" else RENDERERS.get(result.algorithm, _evolution)
    renderer(result, Console(), Console(stderr=True))
