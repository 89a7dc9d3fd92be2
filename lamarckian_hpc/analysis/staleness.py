"""Staleness of the samples a learner trained on (learner version minus the version that sampled
them): its histogram over a run, and its mean and maximum against the hosts a run spread over,
across runs, where the relay tree should keep it flat while a flat broadcast's grows (the paper's
Fig. 7d). `staleness_analysis` is the topic that `analysis/staleness.py` and `lamarckian-hpc report`
draw.

The histogram adds up the per-update counts `staleness_count_0` .. `staleness_count_8plus` that
training runs write beside `staleness_mean` and `staleness_max`: how many trained steps had each
staleness over the whole run. Runs without the counts (older files) are left out of it; their
mean and maximum still appear against hosts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from .loader import Requirement, RunData
from .plotting import Analysis, FigureResult, new_figure, save
from .scaling import mean_after_warmup, run_cores, run_layout

#: A histogram bin's metric: staleness_count_<k>, or staleness_count_<k>plus for the last, open bin.
COUNT_METRIC = re.compile(r"^staleness_count_(\d+)(plus)?$")
NEEDS = Requirement("/metrics/staleness_mean rows", "train runs (lamarckian-hpc train)",
                    lambda run: run.has_metric("staleness_mean"))


def count_metrics(run: RunData) -> list[tuple[int, str, str]]:
    """(lower staleness, label, metric name) of each histogram bin the run wrote, in order."""
    bins = []
    for name in run.metrics["metric"].unique():
        match = COUNT_METRIC.match(str(name))
        if match:
            low = int(match.group(1))
            bins.append((low, f"{low}+" if match.group(2) else str(low), str(name)))
    return sorted(bins)


def staleness_histogram_data(runs: Sequence[RunData]) -> pd.DataFrame:
    """Rows (run, staleness, steps, share): the trained steps of each staleness, summed over every
    update of the run, and their share of the run's steps."""
    frames = []
    for run in runs:
        bins = count_metrics(run)
        if not bins:
            continue
        steps = np.array([run.metric(name)["value"].sum() for _, _, name in bins], dtype=float)
        total = steps.sum()
        frames.append(pd.DataFrame({"run": run.name, "staleness": [label for _, label, _ in bins], "steps": steps,
                                    "share": steps / total if total > 0 else np.nan}))
    if not frames:
        return pd.DataFrame(columns=["run", "staleness", "steps", "share"])
    return pd.concat(frames, ignore_index=True)


def run_hosts(run: RunData) -> int:
    """The hosts a run's actors ran on: `runtime.simulated_nodes` when it simulated nodes on one
    host (tests and benchmarks of the tree), else the nodes with actors in /meta `actors_per_node`,
    else the length of /meta `hosts` (1 for a run on one machine)."""
    simulated = run.config_value("runtime.simulated_nodes")
    if isinstance(simulated, int) and simulated > 0:
        return simulated
    per_node = run.meta.get("actors_per_node")
    if isinstance(per_node, dict) and per_node:
        return sum(1 for count in per_node.values() if count)
    hosts = run.meta.get("hosts")
    return len(hosts) if isinstance(hosts, (list, tuple, np.ndarray)) and len(hosts) else 1


def staleness_across_runs(runs: Sequence[RunData]) -> pd.DataFrame:
    """One row per run with staleness: hosts, cores, broadcast, the mean of `staleness_mean` (start-up
    row left out, as for scaling), the largest `staleness_max`, and the share of steps trained fresh
    (staleness 0) where the histogram is there."""
    histogram = staleness_histogram_data(runs)
    rows = []
    for run in runs:
        if not run.has_metric("staleness_mean"):
            continue
        own = histogram[histogram["run"] == run.name]
        fresh = own.loc[own["staleness"] == "0", "share"]
        largest = run.metric("staleness_max")["value"]
        serial = run.config_value("runtime.mode") == "serial"
        rows.append({"run": run.name, "hosts": run_hosts(run), "cores": run_cores(run),
                     "broadcast": "serial" if serial else run_layout(run),
                     "updates": len(run.metric("staleness_mean")),
                     "staleness_mean": mean_after_warmup(run, "staleness_mean"),
                     "staleness_max": float(largest.max()) if len(largest) else np.nan,
                     "fresh_share": float(fresh.iloc[0]) if len(fresh) else np.nan,
                     "steps": float(own["steps"].sum()) if len(own) else np.nan})
    columns = ["run", "hosts", "cores", "broadcast", "updates", "staleness_mean", "staleness_max", "fresh_share",
               "steps"]
    return pd.DataFrame(rows, columns=columns).astype({"staleness_mean": float, "staleness_max": float})


def plot_staleness_histograms(runs: Sequence[RunData], out_path: Path) -> FigureResult | None:
    """Share of trained steps at each staleness, side-by-side bars per run; None without counts."""
    data = staleness_histogram_data(runs)
    if data.empty:
        return None
    labels = list(dict.fromkeys(data["staleness"]))
    names = list(dict.fromkeys(data["run"]))
    width = 0.8 / len(names)
    figure, (axis,) = new_figure(width=max(6.0, 0.6 * len(labels) * max(1, len(names) // 2)))
    for k, name in enumerate(names):
        rows = data[data["run"] == name].set_index("staleness").reindex(labels)
        axis.bar(np.arange(len(labels)) + (k - (len(names) - 1) / 2) * width, 100.0 * rows["share"].fillna(0.0),
                 width=width, label=name)
    axis.set_xticks(range(len(labels)), labels)
    axis.set_xlabel("staleness (learner version - sampling version)")
    axis.set_ylabel("trained steps (%)")
    axis.grid(alpha=0.3, axis="y")
    axis.legend(fontsize="small")
    return save(figure, out_path, "staleness of the trained steps over the run", data)


def plot_staleness_against_hosts(across: pd.DataFrame, out_path: Path) -> FigureResult | None:
    """Mean (solid) and maximum (dotted) staleness against hosts, one line per broadcast."""
    data = across.dropna(subset=["staleness_mean"]).sort_values(["broadcast", "hosts"])
    if data.empty:
        return None
    figure, (axis,) = new_figure()
    for broadcast, rows in data.groupby("broadcast", sort=True):
        grouped = rows.groupby("hosts").agg(mean=("staleness_mean", "mean"), largest=("staleness_max", "max"))
        line, = axis.plot(grouped.index, grouped["mean"], marker="o", label=f"{broadcast}: mean")
        if grouped["largest"].notna().any():
            axis.plot(grouped.index, grouped["largest"], "x:", color=line.get_color(), label=f"{broadcast}: max")
    axis.set_xlabel("hosts (simulated nodes where the run simulated them)")
    axis.set_ylabel("staleness (policy versions)")
    axis.set_xticks(sorted(data["hosts"].unique()))
    axis.grid(alpha=0.3)
    axis.legend(fontsize="small")
    return save(figure, out_path, "staleness against hosts", data)


def staleness_analysis(runs: Sequence[RunData], out_dir: Path) -> Analysis:
    """`staleness_histogram.png` of every run with counts and, given two runs or more,
    `staleness_vs_hosts.png`; the table has one row per run (staleness_across_runs)."""
    across = staleness_across_runs(runs)
    figures = [plot_staleness_histograms(runs, Path(out_dir) / "staleness_histogram.png")]
    if len(across) >= 2:
        figures.append(plot_staleness_against_hosts(across, Path(out_dir) / "staleness_vs_hosts.png"))
    return Analysis([figure for figure in figures if figure is not None], across)
