"""`lamarckian-hpc report`: every figure and table that applies to the run files and benchmark
results found under a path, in one Markdown file (`report.md`) that links its PNGs.

What is drawn depends only on what the files hold: learning curves for runs with a progress
metric, staleness histograms (and staleness against hosts across runs) for training runs,
throughput and hosts over the run for runs that nodes joined or left while they trained, scaling
figures when runs or the sampling benchmark cover more than one core count, the tree comparison
when the broadcast or staleness results (or runs differing in `runtime.broadcast`) are there,
Pareto fronts and hypervolume for multi-objective populations, lineage for any population,
hyperparameters for PBT, payoff and Elo for runs with a `/league`, and the returns, lengths, actions
and step rewards of the episodes a run recorded (`/trajectories`). Each section is one topic's
`Analysis`, from the same function that the topic's `analysis/NAME.py` script calls.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from . import benchmarks as bench
from .curves import PROGRESS_METRICS, learning_curve_analysis, progress_metric
from .league import league_analysis
from .lineage import lineage_analysis
from .loader import RunData, RunFileError, find_run_files, load_run
from .membership import membership_analysis
from .pareto import pareto_analysis
from .plotting import Analysis, FigureResult
from .scaling import plot_scale_model, plot_tree_vs_flat, scaling_analysis, tree_vs_flat_from_runs
from .staleness import staleness_analysis
from .tables import cpu_utilization_table, markdown_table, run_summary
from .trajectories import trajectory_analysis

REPORT_NAME = "report.md"
BENCHMARK_TITLES = {
    "sampling": "Sampling throughput against actor processes", "raw_bound": "Sampling against the raw bound",
    "vs_rllib": "Ours vs RLlib (PPO)", "nsga2_vs_pymoo": "Ours vs pymoo (NSGA-II)",
    "broadcast": "Relay tree vs flat vs MPI Bcast", "staleness": "Staleness, flat vs tree",
    "pbt_vs_tune": "Ours vs Ray Tune (PBT+PPO)", "pong_steps": "Pong environment steps/s",
    "scale_model": "Scale model: predicted broadcast and staleness",
}


@dataclass
class Report:
    """What `build_report` wrote: the Markdown file, its figures, the runs read and what was skipped."""

    markdown_path: Path
    figures: list[FigureResult]
    runs: list[RunData]
    benchmarks: dict[str, Any]
    skipped: list[str] = field(default_factory=list)


def collect_inputs(path: Path) -> tuple[list[RunData], dict[str, Any], list[str]]:
    """Runs and benchmark results under `path`; raises RunFileError (one line) when there is
    nothing to report on. A file given directly must be a run file; in a folder, files that are
    not run files are listed as skipped."""
    if not path.exists():
        raise RunFileError(f"error: no such run file or folder: {path}")
    if path.is_file():
        if path.suffix.lower() not in (".h5", ".hdf5"):
            raise RunFileError(f"error: {path} is not a run file (expected a .h5 run file or a folder)")
        return [load_run(path)], {}, []
    runs, skipped = [], []
    for candidate in find_run_files(path):
        try:
            runs.append(load_run(candidate))
        except RunFileError as error:
            skipped.append(str(error).removeprefix("error: "))
    results = bench.load_benchmarks(path)
    if not runs and not results:
        raise RunFileError(f"error: {path} holds no run files (.h5) and no benchmark results (.json)")
    return runs, results, skipped


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Rows of the non-empty frames (an empty one keeps the first frame's columns)."""
    nonempty = [frame for frame in frames if not frame.empty]
    return pd.concat(nonempty, ignore_index=True) if nonempty else frames[0]


def _draw(runs: list[RunData], results: dict[str, Any], figures_dir: Path) -> dict[str, list[Analysis]]:
    """Every topic that applies, by report section."""
    sections: dict[str, list[Analysis]] = {}

    def add(section: str, analysis: Analysis) -> None:
        if analysis.figures:
            sections.setdefault(section, []).append(analysis)

    def figure(result: FigureResult | None) -> Analysis:
        return Analysis([result] if result is not None else [], pd.DataFrame())

    add("Learning curves", learning_curve_analysis(runs, figures_dir))
    add("Staleness", staleness_analysis(runs, figures_dir))
    add("Throughput and hosts over a run", membership_analysis(runs, figures_dir))
    sampling = bench.sampling_frame(results["sampling"]) if "sampling" in results else None
    hosts = bench.sampling_hosts_frame(results["sampling_hosts"]) if "sampling_hosts" in results else None
    add("Scaling with cores", scaling_analysis(runs, figures_dir, sampling, min_core_counts=2, hosts=hosts))
    broadcast = bench.broadcast_frame(results["broadcast"]) if "broadcast" in results else pd.DataFrame()
    staleness = _concat([bench.staleness_frame(results["staleness"]) if "staleness" in results else pd.DataFrame(),
                         tree_vs_flat_from_runs(runs)])
    tree = "Relay tree vs flat broadcast"
    add(tree, figure(plot_tree_vs_flat(broadcast, staleness, figures_dir / "tree_vs_flat.png")))
    if "scale_model" in results:
        prediction = bench.scale_model_frame(results["scale_model"])
        add(tree, figure(plot_scale_model(prediction, figures_dir / "scale_model.png")))
    add("Pareto fronts", pareto_analysis(runs, figures_dir))
    add("Population lineage", lineage_analysis(runs, figures_dir))
    add("League", league_analysis(runs, figures_dir))
    add("Recorded episodes", trajectory_analysis(runs, figures_dir))
    return sections


def _run_overview(runs: list[RunData]) -> pd.DataFrame:
    rows = []
    for run in runs:
        metric = progress_metric(run)
        last = run.last_values()
        rows.append({"run": run.name, "algorithm": run.config_value("algorithm.name", "ppo"),
                     "env / problem": run.config_value("env.id") or run.config_value("problem.name") or "",
                     "status": run.status, "progress metric": metric or "",
                     "final value": last.get(metric) if metric else None})
    return pd.DataFrame(rows)


def build_report(path: str | Path, out_dir: str | Path | None = None) -> Report:
    """Reads `path` (a run file or a folder of runs and results) and writes `out_dir/report.md`
    with its figures under `out_dir/figures/`. out_dir defaults to `<folder>/report` or
    `<run>-report` beside a single run file."""
    path = Path(path)
    runs, results, skipped = collect_inputs(path)
    out = Path(out_dir) if out_dir is not None else (
        path / "report" if path.is_dir() else path.with_name(f"{path.stem}-report"))
    figures_dir = out / "figures"
    sections = _draw(runs, results, figures_dir)
    lines = [f"# Report: {path}", "",
             f"Generated {time.strftime('%Y-%m-%d %H:%M:%S %Z')} by `lamarckian-hpc report` from "
             f"{len(runs)} run file(s) and {len(results)} benchmark result file(s).", ""]
    if skipped:
        lines += ["Skipped (not readable as run files):", ""] + [f"- {reason}" for reason in skipped] + [""]
    if runs:
        lines += ["## Runs", "", markdown_table(_run_overview(runs))]
    for section, analyses in sections.items():
        lines += [f"## {section}", ""]
        for analysis in analyses:
            for figure in analysis.figures:
                link = figure.path.relative_to(out).as_posix()
                lines += [f"![{figure.title}]({link})", "", f"*{figure.title}* ([{link}]({link}))", ""]
            if not analysis.table.empty:
                lines += [markdown_table(analysis.table)]
    cpu = cpu_utilization_table(runs, results)
    if not cpu.empty:
        lines += ["## CPU utilization", "", "Mean `cpu_utilization` (share of the allocated cores, start-up row "
                  "left out):", "", markdown_table(cpu)]
    if not any(run.league for run in runs):
        lines += ["## League", "", "No run here has a `/league` group, so there is no payoff matrix or Elo figure.", ""]
    for name in sorted(results):
        table = bench.benchmark_table(name, results[name])
        stem, _, label = name.partition(":")  # an entry other than the file's main one: STEM:LABEL
        source = f"`{stem}.json`" + (f", entry `{label}`" if label else "")
        lines += [f"## Benchmark: {BENCHMARK_TITLES.get(name, name)} ({source})", "", markdown_table(table)]
    for run in runs:
        shown = run.path.relative_to(path) if path.is_dir() and run.path.is_relative_to(path) else run.path
        lines += [f"## Run `{run.name}`", "", f"File: `{shown}`", "", markdown_table(run_summary(run))]
    out.mkdir(parents=True, exist_ok=True)
    markdown_path = out / REPORT_NAME
    markdown_path.write_text("\n".join(lines))
    figures = [figure for analyses in sections.values() for analysis in analyses for figure in analysis.figures]
    return Report(markdown_path=markdown_path, figures=figures, runs=runs, benchmarks=results, skipped=skipped)


__all__ = ["PROGRESS_METRICS", "REPORT_NAME", "Report", "build_report", "collect_inputs"]
