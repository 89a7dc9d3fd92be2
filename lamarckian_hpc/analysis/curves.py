"""Learning curves against env frames and against wall time (the paper's Figs. 8 and 9), for one
run or several: the return of RL runs, the best member's return of PBT, the hypervolume or best
objective of EC runs, each run on the metric that says how far it got."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pandas as pd

from .loader import RunData
from .plotting import FigureResult, new_figure, save

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
