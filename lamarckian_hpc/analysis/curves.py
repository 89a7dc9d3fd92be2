"""Learning curves against env frames and against wall time (the paper's Figs. 8 and 9), for one
run or several: the return of RL runs, the best member's return of PBT, the hypervolume or best
objective of EC runs, each run on the metric that says how far it got. `learning_curve_analysis`
is the topic that `analysis/learning_curves.py` and `lamarckian-hpc report` both draw."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from .loader import Requirement, RunData
from .plotting import Analysis, FigureResult, new_figure, save

#: The metric that measures progress, in order of preference, with its axis label.
PROGRESS_METRICS: dict[str, str] = {
    "episode_return_mean": "mean episode return",
    "best_return": "best member's mean return (PBT)",
    "best_normalized_score": "best normalized score (EMOGI)",
    "hypervolume": "hypervolume",
    "best_objective": "best objective",
    "main_exploitability": "main agent's exploitability (league)",
}
X_AXES = {"env_frames": "env frames", "wall_time": "wall time (s)"}
#: File-name suffix of each x axis's figure (`curve_<metric>_<suffix>.png`).
X_SUFFIXES = {"env_frames": "frames", "wall_time": "wall_time"}
NEEDS = Requirement(f"rows of a progress metric ({', '.join(PROGRESS_METRICS)})",
                    "train and evolve runs (from their first metrics row on)",
                    lambda run: progress_metric(run) is not None)


def metric_requirement(name: str) -> Requirement:
    """What a run needs for the curves of one named metric."""
    return Requirement(f"/metrics/{name} rows", "the runs that record it (`lamarckian-hpc inspect RUN.h5` lists "
                       "a run's metrics)", lambda run: run.has_metric(name))


def progress_metric(run: RunData) -> str | None:
    """The first of PROGRESS_METRICS that the run wrote rows for."""
    return next((name for name in PROGRESS_METRICS if run.has_metric(name)), None)


def learning_curve_data(runs: Sequence[RunData], metric: str | None = None) -> pd.DataFrame:
    """Rows (run, metric, env_frames, wall_time, value) of each run's progress metric, or of
    `metric` for every run that has it."""
    frames = []
    for run in runs:
        name = metric if metric is not None else progress_metric(run)
        if name is None or not run.has_metric(name):
            continue
        rows = run.metric(name)[["env_frames", "wall_time", "value"]].copy()
        rows.insert(0, "metric", name)
        rows.insert(0, "run", run.name)
        frames.append(rows)
    if not frames:
        return pd.DataFrame(columns=["run", "metric", "env_frames", "wall_time", "value"])
    return pd.concat(frames, ignore_index=True)


def plot_learning_curves(runs: Sequence[RunData], out_path: Path, x: str = "env_frames",
                         metric: str | None = None) -> FigureResult | None:
    """One line per run of `metric` (default: each run's progress metric) against `x`
    (env_frames or wall_time); None when no run has rows to plot."""
    if x not in X_AXES:
        raise ValueError(f"x must be one of {sorted(X_AXES)}, got {x!r}")
    data = learning_curve_data(runs, metric)
    if data.empty:
        return None
    figure, (axis,) = new_figure()
    for (run_name, metric_name), rows in data.groupby(["run", "metric"], sort=False):
        axis.plot(rows[x], rows["value"], label=run_name if data["metric"].nunique() == 1
                  else f"{run_name} ({metric_name})")
    metrics = data["metric"].unique()
    axis.set_xlabel("evaluations" if x == "env_frames" and set(metrics) <= {"hypervolume", "best_objective"}
                    else X_AXES[x])
    axis.set_ylabel(PROGRESS_METRICS.get(metrics[0], metrics[0]) if len(metrics) == 1 else "value")
    axis.grid(alpha=0.3)
    axis.legend(fontsize="small")
    title = f"{', '.join(PROGRESS_METRICS.get(name, name) for name in metrics)} against {X_AXES[x]}"
    return save(figure, out_path, title, data)


def learning_curve_table(data: pd.DataFrame) -> pd.DataFrame:
    """One row per (run, metric) of learning_curve_data: rows, how far it got, and its first,
    smallest, largest and final value (whether larger is better depends on the metric)."""
    columns = ["run", "metric", "rows", "env_frames", "wall_time", "first", "min", "max", "final"]
    if data.empty:
        return pd.DataFrame(columns=columns)
    grouped = data.groupby(["run", "metric"], sort=False)
    table = grouped.agg(rows=("value", "size"), env_frames=("env_frames", "max"), wall_time=("wall_time", "max"),
                        first=("value", "first"), min=("value", "min"), max=("value", "max"),
                        final=("value", "last"))
    return table.reset_index()[columns]


def learning_curve_analysis(runs: Sequence[RunData], out_dir: Path, metric: str | None = None) -> Analysis:
    """Curves of each group of runs that share a progress metric (or of `metric` for all), against
    env frames and against wall time: `curve_<metric>_frames.png` and `curve_<metric>_wall_time.png`."""
    by_metric: dict[str, list[RunData]] = {}
    for run in runs:
        name = metric if metric is not None else progress_metric(run)
        if name is not None and run.has_metric(name):
            by_metric.setdefault(name, []).append(run)
    figures = []
    for name, metric_runs in by_metric.items():
        for x, suffix in X_SUFFIXES.items():
            figure = plot_learning_curves(metric_runs, Path(out_dir) / f"curve_{name}_{suffix}.png", x=x, metric=name)
            if figure is not None:
                figures.append(figure)
    return Analysis(figures, learning_curve_table(learning_curve_data(runs, metric)))
