"""Tables for the report: one summary per run (config, final metrics, status), the
CPU-utilization table (the paper's Table IV), and Markdown rendering of any DataFrame."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from .loader import RunData
from .scaling import run_cores

#: Config fields shown in a run's summary, when the run has them.
CONFIG_FIELDS = ("algorithm.name", "env.id", "problem.name", "runtime.mode", "runtime.num_actors",
                 "runtime.broadcast", "algorithm.population_size", "algorithm.generations", "seed")
#: Final metric values shown in a run's summary, when the run wrote them.
FINAL_METRICS = ("episode_return_mean", "best_return", "hypervolume", "best_objective", "best_normalized_score",
                 "front_size", "env_frames_per_second", "staleness_mean", "staleness_max", "cpu_utilization",
                 "actor_restarts")


def format_value(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return f"{int(value):,}"
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(frame: pd.DataFrame, max_rows: int = 60) -> str:
    """A GitHub Markdown table (pandas' own needs the `tabulate` package, which we do not keep)."""
    if frame.empty:
        return "(no rows)\n"
    shown = frame.head(max_rows)
    lines = ["| " + " | ".join(str(column) for column in shown.columns) + " |",
             "|" + "|".join("---:" if pd.api.types.is_numeric_dtype(shown[column]) else "---"
                            for column in shown.columns) + "|"]
    for row in shown.itertuples(index=False):
        lines.append("| " + " | ".join(format_value(value) for value in row) + " |")
    if len(frame) > max_rows:
        lines.append(f"\n({len(frame) - max_rows} more rows not shown)")
    return "\n".join(lines) + "\n"


def run_summary(run: RunData) -> pd.DataFrame:
    """(field, value) rows: status, size, the config fields that matter, and final metrics."""
    rows: list[tuple[str, Any]] = [("status", run.status)]
    if not run.metrics.empty:
        rows.append(("env frames (largest)", int(run.metrics["env_frames"].max())))
        rows.append(("wall time (s)", float(run.metrics["wall_time"].max())))
    if not run.population.empty:
        rows.append(("individuals evaluated", len(run.population)))
        rows.append(("generations recorded", int(run.population["generation"].nunique())))
    for dotted in CONFIG_FIELDS:
        value = run.config_value(dotted)
        if value is not None:
            rows.append((f"`{dotted}`", value))
    last = run.last_values()
    for name in FINAL_METRICS:
        if name in last:
            rows.append((f"final {name}", last[name]))
    if run.league:
        rows.append(("league datasets", ", ".join(sorted(run.league))))
    return pd.DataFrame(rows, columns=["field", "value"]).astype({"value": object})


def cpu_utilization_table(runs: Sequence[RunData], benchmarks: dict[str, Any]) -> pd.DataFrame:
    """Mean `cpu_utilization` (fraction of the allocated cores, without the start-up row) of each
    run that wrote it, beside the sampling and RLlib benchmarks' figures when present."""
    rows: list[dict[str, Any]] = []
    for run in runs:
        values = run.metric("cpu_utilization")["value"].dropna() if run.has_metric("cpu_utilization") else []
        if len(values):
            steady = values.iloc[1:] if len(values) > 1 else values
            rows.append({"source": run.name, "what": f"run ({run.config_value('env.id', '')})",
                         "cores": run_cores(run), "cpu_utilization": float(steady.mean())})
    for row in (benchmarks.get("sampling") or {}).get("results", []):
        if row.get("cpu_utilization") is not None:
            rows.append({"source": "sampling.json", "what": f"sampling benchmark ({row.get('env')})",
                         "cores": row.get("num_actors"), "cpu_utilization": row["cpu_utilization"]})
    vs_rllib = benchmarks.get("vs_rllib") or {}
    workers = (vs_rllib.get("settings") or {}).get("workers")
    for summary in vs_rllib.get("summaries", []):
        for side, label in (("ours", "ours"), ("rllib", "RLlib")):
            value = (summary.get(side) or {}).get("cpu_utilization")
            if value is not None:
                rows.append({"source": "vs_rllib.json", "what": f"PPO {summary.get('env')}: {label}",
                             "cores": workers, "cpu_utilization": value})
    frame = pd.DataFrame(rows, columns=["source", "what", "cores", "cpu_utilization"])
    frame["cpu_utilization_percent"] = 100.0 * frame["cpu_utilization"].astype(float)
    return frame
