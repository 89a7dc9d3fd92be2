"""Throughput against the nodes a run had over its life: actor jobs join a running run and leave it
(`lamarckian-hpc join`, `launch --actor-jobs`), and every update records the hosts and actors
sampling then (`hosts_connected`, `actors_connected`) beside the env steps per second. The figure
draws both against wall time for each run whose hosts changed while it ran; the table gives, for
each stretch of the run with one number of hosts, its length, its median env steps per second and
that per host, so throughput per node after each join can be read against a static run.
`membership_analysis` is the topic `lamarckian-hpc report` draws.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from .loader import Requirement, RunData
from .plotting import Analysis, FigureResult, new_figure, save

NEEDS = Requirement("/metrics/hosts_connected rows", "distributed train runs (lamarckian-hpc train, launch)",
                    lambda run: run.has_metric("hosts_connected") and run.has_metric("env_frames_per_second"))


def membership_data(run: RunData) -> pd.DataFrame:
    """Rows (run, wall_time, hosts, actors, env_frames_per_second), one per update."""
    hosts, rate = run.metric("hosts_connected"), run.metric("env_frames_per_second")
    actors = run.metric("actors_connected") if run.has_metric("actors_connected") else None
    rows = min(len(hosts), len(rate))
    return pd.DataFrame({"run": run.name, "wall_time": hosts["wall_time"].to_numpy()[:rows],
                         "hosts": hosts["value"].to_numpy()[:rows].astype(int),
                         "actors": (actors["value"].to_numpy()[:rows].astype(int) if actors is not None
                                    else np.zeros(rows, dtype=int)),
                         "env_frames_per_second": rate["value"].to_numpy()[:rows]})


def stretches(data: pd.DataFrame) -> pd.DataFrame:
    """One row per stretch of updates with the same number of hosts: when it began and ended, its
    median env steps per second, and that per host."""
    change = data["hosts"].ne(data["hosts"].shift()).cumsum()
    rows = []
    for _, part in data.groupby(change, sort=True):
        median = float(part["env_frames_per_second"].median())
        hosts = int(part["hosts"].iloc[0])
        rows.append({"run": part["run"].iloc[0], "hosts": hosts, "actors": int(part["actors"].max()),
                     "from_s": round(float(part["wall_time"].iloc[0]), 1),
                     "to_s": round(float(part["wall_time"].iloc[-1]), 1), "updates": len(part),
                     "env_frames_per_second": round(median, 1),
                     "per_host": round(median / hosts, 1) if hosts else float("nan")})
    return pd.DataFrame(rows)


def plot_throughput_and_nodes(data: pd.DataFrame, out_path: Path, title: str | None = None) -> FigureResult:
    """Env steps per second (left axis) and hosts sampling (right axis) against wall time."""
    figure, (axis,) = new_figure(width=7.0)
    for name, part in data.groupby("run", sort=False):
        axis.plot(part["wall_time"], part["env_frames_per_second"], linewidth=0.8, label=f"{name}: env steps/s")
    axis.set_xlabel("wall time (s)")
    axis.set_ylabel("env steps per second")
    nodes = axis.twinx()
    for name, part in data.groupby("run", sort=False):
        nodes.step(part["wall_time"], part["hosts"], where="post", color="black", linewidth=1.2,
                   label=f"{name}: hosts")
    nodes.set_ylabel("hosts sampling")
    nodes.set_ylim(0, max(1, int(data["hosts"].max())) + 1)
    lines = axis.get_legend_handles_labels()
    more = nodes.get_legend_handles_labels()
    axis.legend(lines[0] + more[0], lines[1] + more[1], fontsize=7, loc="upper left")
    return save(figure, out_path, title or "Throughput and hosts over the run", data)


def membership_analysis(runs: Sequence[RunData], out_dir: Path) -> Analysis:
    """The figure and the stretches' table for every run whose hosts changed while it trained."""
    changing = [membership_data(run) for run in runs if NEEDS.holds(run)]
    changing = [data for data in changing if len(data) and data["hosts"].nunique() > 1]
    if not changing:
        return Analysis([], pd.DataFrame())
    data = pd.concat(changing, ignore_index=True)
    figure = plot_throughput_and_nodes(data, Path(out_dir) / "throughput_and_hosts.png")
    return Analysis([figure], pd.concat([stretches(part) for part in changing], ignore_index=True))
