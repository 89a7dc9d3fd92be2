"""Scaling figures: sampling throughput and staleness against cores (the paper's Fig. 7), and the
relay tree against a flat broadcast (Fig. 7d). Points come from the sampling benchmark's JSON and
from distributed runs grouped by their core count (`run_cores`); the tree comparison from the
broadcast and staleness benchmarks' JSON, or from runs that differ in `runtime.broadcast`.
`scaling_analysis` is the topic that `analysis/scaling.py` and `lamarckian-hpc report` both draw."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from .loader import Requirement, RunData
from .plotting import Analysis, FigureResult, new_figure, save

SCALING_COLUMNS = ["source", "series", "cores", "broadcast", "steps_per_second", "trained_per_second",
                   "staleness_mean", "staleness_max", "cpu_utilization"]
MEASURED_COLUMNS = SCALING_COLUMNS[4:]
NEEDS = Requirement("/metrics/env_frames_per_second rows", "train runs (lamarckian-hpc train) and PBT runs",
                    lambda run: run.has_metric("env_frames_per_second"))


def run_layout(run: RunData) -> str:
    """flat or tree, as the run used it (/meta `broadcast_layout`), else as its config asked."""
    layout = run.meta.get("broadcast_layout")
    return str(layout) if layout else str(run.config_value("runtime.broadcast", "flat"))


def _typed(frame: pd.DataFrame) -> pd.DataFrame:
    """Measured columns as float (a missing value is NaN, not None), cores as int."""
    return frame.astype({**{column: float for column in MEASURED_COLUMNS}, "cores": int})


def mean_after_warmup(run: RunData, name: str) -> float | None:
    """Mean of a metric without its first row (start-up: processes still spawning)."""
    values = run.metric(name)["value"]
    values = values.iloc[1:] if len(values) > 1 else values
    values = values.dropna()
    return float(values.mean()) if len(values) else None


def run_cores(run: RunData) -> int | None:
    """The cores a run sampled on, counted as actor processes (one core each, as the paper
    counts): 1 for a serial run, else `runtime.num_actors`, else the actors that connected
    (/meta `actors_connected`, for a run left at one actor per core); None when unknown."""
    if run.config_value("runtime.mode") == "serial":
        return 1
    for value in (run.config_value("runtime.num_actors"), run.meta.get("actors_connected")):
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value > 0:
            return int(value)
    return None


def _series(run: RunData) -> str:
    """Runs are compared only with runs of the same algorithm, env, runtime and broadcast."""
    what = f"{run.config_value('algorithm.name', 'ppo')} {run.config_value('env.id', '?')}"
    if run.config_value("runtime.mode") == "serial":
        return f"runs: {what}, serial"
    return f"runs: {what}, {run_layout(run)} broadcast"


def scaling_from_runs(runs: Sequence[RunData]) -> pd.DataFrame:
    """One row per RL run with a known core count: mean sampled frames/s, staleness and CPU use."""
    rows = []
    for run in runs:
        cores = run_cores(run)
        if cores is None or not run.has_metric("env_frames_per_second"):
            continue
        staleness_max = run.metric("staleness_max")["value"]
        rows.append({
            "source": str(run.path), "series": _series(run), "cores": cores,
            "broadcast": run_layout(run),
            "steps_per_second": mean_after_warmup(run, "env_frames_per_second"),
            "trained_per_second": mean_after_warmup(run, "trained_frames_per_second"),
            "staleness_mean": mean_after_warmup(run, "staleness_mean"),
            "staleness_max": float(staleness_max.max()) if len(staleness_max) else None,
            "cpu_utilization": mean_after_warmup(run, "cpu_utilization"),
        })
    return _typed(pd.DataFrame(rows, columns=SCALING_COLUMNS))


def scaling_from_benchmark(sampling: pd.DataFrame, source: str = "sampling.json") -> pd.DataFrame:
    """The sampling benchmark's table (analysis.benchmarks.sampling_frame) in the same columns."""
    frame = pd.DataFrame({
        "source": source, "series": "benchmark: " + sampling["env"].astype(str), "cores": sampling["cores"],
        "broadcast": "flat", "steps_per_second": sampling["steps_per_second"], "trained_per_second": None,
        "staleness_mean": sampling["staleness_mean"], "staleness_max": None,
        "cpu_utilization": sampling["cpu_utilization"],
    })
    return _typed(frame[SCALING_COLUMNS])


def scaling_from_hosts(hosts: pd.DataFrame, source: str = "sampling_hosts.json") -> pd.DataFrame:
    """The emulated-hosts benchmark's points (analysis.benchmarks.sampling_hosts_frame) in the same
    columns, one series per layout; a series name says each host's cores when they had a quota."""
    if hosts.empty:
        return pd.DataFrame(columns=SCALING_COLUMNS)
    quota = hosts["host_cpus"].iloc[0]
    cores = f", {quota:g} cores per host" if pd.notna(quota) else ""
    frame = pd.DataFrame({
        "source": source, "series": "hosts: " + hosts["env"].astype(str) + ", " + hosts["broadcast"].astype(str)
        + " broadcast" + cores, "cores": hosts["cores"], "broadcast": hosts["broadcast"],
        "steps_per_second": hosts["steps_per_second"], "trained_per_second": None,
        "staleness_mean": hosts["staleness_mean"], "staleness_max": hosts["staleness_max"], "cpu_utilization": None,
    })
    return _typed(frame[SCALING_COLUMNS])


def _core_axis(axis, data: pd.DataFrame) -> None:
    """Ticks at the core counts measured; doubling counts (1 to 16 hosts) on a log-2 axis."""
    cores = sorted(data["cores"].unique())
    if cores[-1] >= 8 * cores[0]:
        axis.set_xscale("log", base=2)
    axis.set_xticks(cores)
    axis.set_xticklabels([str(core) for core in cores])


def _plot_against_cores(scaling: pd.DataFrame, column: str, label: str, out_path: Path,
                        title: str) -> FigureResult | None:
    data = scaling.dropna(subset=[column]).sort_values(["series", "cores"])
    if data.empty:
        return None
    figure, (axis,) = new_figure()
    for series, rows in data.groupby("series", sort=True):
        grouped = rows.groupby("cores")[column].mean()
        axis.plot(grouped.index, grouped.values, marker="o", label=series)
    axis.set_xlabel("cores (actor processes)")
    axis.set_ylabel(label)
    _core_axis(axis, data)
    axis.grid(alpha=0.3)
    axis.legend(fontsize="small")
    return save(figure, out_path, title, data)


def plot_throughput(scaling: pd.DataFrame, out_path: Path) -> FigureResult | None:
    """Sampled env steps/s against cores, one line per series; a run's trained frames/s dashed
    beside it where the runs wrote `trained_frames_per_second`."""
    data = scaling.dropna(subset=["steps_per_second"]).sort_values(["series", "cores"])
    if data.empty:
        return None
    figure, (axis,) = new_figure()
    for series, rows in data.groupby("series", sort=True):
        sampled = rows.groupby("cores")["steps_per_second"].mean()
        line, = axis.plot(sampled.index, sampled.values, marker="o", label=f"{series}: sampled")
        trained = rows.dropna(subset=["trained_per_second"]).groupby("cores")["trained_per_second"].mean()
        if len(trained):
            axis.plot(trained.index, trained.values, "s--", color=line.get_color(), label=f"{series}: trained")
        if series.startswith("hosts:") and len(sampled) > 1:  # Figure 7's yardstick: linear from one host
            first = sampled.index[0]
            axis.plot(sampled.index, sampled.iloc[0] * sampled.index / first, ":", color=line.get_color(),
                      label=f"{series}: linear")
    axis.set_xlabel("cores (actor processes)")
    axis.set_ylabel("env frames/s")
    _core_axis(axis, data)
    axis.grid(alpha=0.3)
    axis.legend(fontsize="small")
    return save(figure, out_path, "sampling throughput against cores", data)


def plot_staleness(scaling: pd.DataFrame, out_path: Path) -> FigureResult | None:
    return _plot_against_cores(scaling, "staleness_mean", "mean staleness (policy versions)", out_path,
                               "staleness against cores")


def tree_vs_flat_from_runs(runs: Sequence[RunData]) -> pd.DataFrame:
    """Staleness of runs grouped by (broadcast, cores), in staleness_frame's columns."""
    scaling = scaling_from_runs(runs)
    scaling = scaling[scaling["cores"] > 1].dropna(subset=["staleness_mean"])
    if scaling["broadcast"].nunique() < 2:
        return pd.DataFrame(columns=["receivers", "broadcast", "staleness_mean", "staleness_max", "source"])
    grouped = scaling.groupby(["cores", "broadcast"]).agg(staleness_mean=("staleness_mean", "mean"),
                                                          staleness_max=("staleness_max", "max"))
    return grouped.reset_index().rename(columns={"cores": "receivers"}).assign(source="runs")


def plot_tree_vs_flat(broadcast: pd.DataFrame, staleness: pd.DataFrame, out_path: Path) -> FigureResult | None:
    """Left: time for the weights to reach every receiver (flat, tree, MPI Bcast) per link mode;
    right: mean staleness of flat vs tree. Either side may be empty; None when both are."""
    panels = [frame for frame in (broadcast, staleness) if not frame.empty]
    if not panels:
        return None
    figure, axes = new_figure(columns=len(panels))
    data = []
    axis_index = 0
    if not broadcast.empty:
        axis = axes[axis_index]
        axis_index += 1
        for mode, rows in broadcast.groupby("link_mode", sort=False):
            rows = rows.sort_values("receivers")
            for column, style in (("flat_ms", "o-"), ("tree_ms", "s-"), ("mpi_ms", "^--")):
                if rows[column].notna().any():
                    axis.plot(rows["receivers"], rows[column], style, label=f"{column[:-3]} ({mode})")
        axis.set_xlabel("receivers")
        axis.set_ylabel("time to reach all receivers (ms, median)")
        axis.set_yscale("log")
        axis.grid(alpha=0.3)
        axis.legend(fontsize="small")
        data.append(broadcast.assign(panel="broadcast"))
    if not staleness.empty:
        axis = axes[axis_index]
        staleness = staleness.assign(source=staleness.get("source", "benchmark")).fillna({"source": "benchmark"})
        for (source, variant), rows in staleness.groupby(["source", "broadcast"]):
            rows = rows.sort_values("receivers")
            axis.plot(rows["receivers"], rows["staleness_mean"], "o-", label=f"{variant} ({source}): mean")
            if rows["staleness_max"].notna().any():
                axis.plot(rows["receivers"], rows["staleness_max"], "x:", label=f"{variant} ({source}): max")
        axis.set_xlabel("receivers")
        axis.set_ylabel("staleness (policy versions)")
        axis.grid(alpha=0.3)
        axis.legend(fontsize="small")
        data.append(staleness.assign(panel="staleness"))
    return save(figure, out_path, "relay tree against flat broadcast", pd.concat(data, ignore_index=True))


def plot_scale_model(prediction: pd.DataFrame, out_path: Path) -> FigureResult | None:
    """The scale model's prediction (analysis.benchmarks.scale_model_frame): throughput (where the
    file has it), broadcast latency and staleness of flat vs tree against cores, on log axes up to
    the largest core count predicted."""
    data = prediction.dropna(subset=["cores"]).sort_values("cores")
    if data.empty:
        return None
    throughput = "flat_steps_per_s" in data.columns
    figure, axes = new_figure(columns=3 if throughput else 2)
    latency, staleness = axes[-2:]
    panels = [(latency, "predicted broadcast latency (ms)"), (staleness, "predicted mean staleness")]
    for variant, style in (("flat", "o-"), ("tree", "s-")):
        latency.plot(data["cores"], data[f"{variant}_ms"], style, label=variant)
        staleness.plot(data["cores"], data[f"{variant}_staleness"], style, label=variant)
        if throughput:
            axes[0].plot(data["cores"], data[f"{variant}_steps_per_s"], style, label=variant)
    if throughput:
        axes[0].set_yscale("log")
        panels.insert(0, (axes[0], "predicted env steps/s"))
    for axis, label in panels:
        axis.set_xscale("log")
        axis.set_xlabel("cores")
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
        axis.legend(fontsize="small")
    latency.set_yscale("log")
    values = data[["flat_staleness", "tree_staleness"]].to_numpy(dtype=float)
    if np.nanmax(values) > 20 * max(np.nanmin(values), 1e-3):  # flat's runs off by orders of magnitude
        staleness.set_yscale("log")
    return save(figure, out_path, "scale model: flat vs tree to many cores", data)


def scaling_analysis(runs: Sequence[RunData], out_dir: Path, sampling: pd.DataFrame | None = None,
            min_core_counts: int = 1, hosts: pd.DataFrame | None = None) -> Analysis:
    """Throughput and staleness against cores (`throughput_vs_cores.png`, `staleness_vs_cores.png`)
    from the runs and, when given, the sampling benchmark's table (analysis.benchmarks.sampling_frame)
    and the emulated hosts' points (analysis.benchmarks.sampling_hosts_frame, one series per layout,
    with its linear yardstick). No figure unless the points cover `min_core_counts` core counts
    (the report asks for two)."""
    frames = [scaling_from_runs(runs)] + ([scaling_from_benchmark(sampling)] if sampling is not None else []) \
        + ([scaling_from_hosts(hosts)] if hosts is not None else [])
    nonempty = [frame for frame in frames if not frame.empty]
    table = pd.concat(nonempty, ignore_index=True) if nonempty else frames[0]
    table = table.sort_values(["series", "cores"], kind="stable").reset_index(drop=True)
    if table["cores"].nunique() < max(min_core_counts, 1):
        return Analysis([], table)
    figures = [plot_throughput(table, Path(out_dir) / "throughput_vs_cores.png"),
               plot_staleness(table, Path(out_dir) / "staleness_vs_cores.png")]
    return Analysis([figure for figure in figures if figure is not None], table)
