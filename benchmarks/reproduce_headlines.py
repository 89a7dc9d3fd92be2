"""The headline figure of each experiment of `reproduce.py`, one line for its report, read from
what the experiment wrote: a run file (`RUN_READERS`) or a benchmark's JSON (`JSON_READERS`)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any, Callable

import numpy as np

def _n(value: float | None, digits: int = 0) -> str:
    return "n/a" if value is None or not np.isfinite(value) else f"{value:,.{digits}f}"


def _median(values: Any) -> float | None:
    numbers = [v for v in (values if isinstance(values, list) else [values]) if isinstance(v, (int, float))]
    return statistics.median(numbers) if numbers else None


def _series(run: Any, name: str) -> Any:
    return run.metric(name) if name in run.metric_names() and len(run.metric(name)) else None


def _read_run(path: Path, read: Callable[[Any], list[str]]) -> str:
    from lamarckian_hpc.storage import open_run

    with open_run(path) as run:
        parts = read(run)
        if not run.closed_cleanly:
            parts.append("run file not closed cleanly")
    return "; ".join(parts)


def _train_run(run: Any) -> list[str]:
    parts = []
    target = (run.config.get("stop") or {}).get("target_return")
    returns = _series(run, "episode_return_mean")
    if returns is not None:
        reached = np.flatnonzero(returns.value >= target) if target is not None else []
        if len(reached):
            i = int(reached[0])
            parts.append(f"target {target:g} reached at {int(returns.env_frames[i]):,} frames in "
                         f"{returns.wall_time[i]:.1f} s")
        else:
            parts.append(f"return {returns.value[-1]:.0f} after {int(returns.env_frames[-1]):,} frames in "
                         f"{returns.wall_time[-1]:.1f} s" + (f" (target {target:g} not reached)" if target else ""))
    for name, label, digits in (("env_frames_per_second", "env frames/s (median)", 0),
                                ("staleness_mean", "staleness (mean)", 2), ("cpu_utilization", "CPU use (mean)", 2)):
        series = _series(run, name)
        if series is not None and np.isfinite(series.value).any() and np.nanmax(np.abs(series.value)) > 0:
            value = float(np.nanmedian(series.value) if digits == 0 else np.nanmean(series.value))
            parts.append(f"{value:.0%}" if name == "cpu_utilization" else f"{_n(value, digits)}")
            parts[-1] += f" {label}"
    return parts


def _nsga2_run(run: Any) -> list[str]:
    hv = _series(run, "hypervolume")
    return [f"hypervolume {hv.value[-1]:.3f} after {len(hv)} generations"] if hv is not None else ["no hypervolume"]


def _pbt_run(run: Any) -> list[str]:
    best, median = _series(run, "best_return"), _series(run, "median_return")
    if best is None:
        return ["no best_return"]
    return [f"best member's return {best.value[-1]:.0f}" + (f" (median {median.value[-1]:.0f})" if median else "")
            + f" after {int(best.env_frames[-1]):,} frames in {best.wall_time[-1]:.1f} s"]


def _emogi_run(run: Any) -> list[str]:
    score, size = _series(run, "best_normalized_score"), _series(run, "front_size")
    low, high = _series(run, "front_activeness_min"), _series(run, "front_activeness_max")
    parts = [f"best normalized score {score.value[-1]:.2f}" if score is not None else "no best_normalized_score"]
    if size is not None:
        parts.append(f"front of {size.value[-1]:.0f}" + (f", activeness {low.value[-1]:.2f}-{high.value[-1]:.2f}"
                                                          if low is not None and high is not None else ""))
    return parts


def _league_run(run: Any) -> list[str]:
    value = _series(run, "main_exploitability")
    return ([f"main agent's exploitability {value.value[0]:.2f} -> {value.value[-1]:.2f} over "
             f"{int(value.env_frames[-1]):,} updates"] if value is not None else ["no main_exploitability"])


def _sampling(result: dict[str, Any]) -> str:
    by_env: dict[str, list[dict[str, Any]]] = {}
    for row in result.get("results", []):
        by_env.setdefault(row["env"], []).append(row)
    return "; ".join(f"{env}: " + " / ".join(_n(r["steps_per_second"]) for r in rows) + " env steps/s at "
                     + " / ".join(str(r["num_actors"]) for r in rows) + " actors ("
                     + " / ".join(_n(r.get("ratio_to_raw"), 2) for r in rows) + " of raw)"
                     for env, rows in by_env.items())


def _raw_bound(result: dict[str, Any]) -> str:
    return "; ".join(f"{r['env']}: trainer sampling {_n(r['trainer_median'])} vs raw {_n(r['raw_median'])} env "
                     f"steps/s ({r['ratio']:.2f})" for r in result.get("results", []))


def _nsga2_vs_pymoo(result: dict[str, Any]) -> str:
    rows = {(r["problem"], r["side"]): r for r in result.get("rows", [])}
    problems = list(dict.fromkeys(problem for problem, _ in rows))
    parts = []
    for problem in problems[:2]:
        ours, theirs = rows.get((problem, "ours")), rows.get((problem, "pymoo"))
        if ours and theirs:
            parts.append(f"{problem}: hypervolume {_median(ours['hv']):.3f} ours vs {_median(theirs['hv']):.3f} "
                         f"pymoo, {1e3 * _median(ours['seconds_per_generation']):.1f} vs "
                         f"{1e3 * _median(theirs['seconds_per_generation']):.1f} ms per generation")
    return "; ".join(parts) + (f" ({len(problems)} problems)" if len(problems) > 2 else "")


def _vs_rllib(result: dict[str, Any]) -> str:
    parts = []
    for summary in result.get("summaries", []):
        ours, rllib, ratio = summary["ours"], summary["rllib"], summary.get("ratio", {})
        text = (f"{summary['env']}: env steps/s {_n(ours['sampled_steps_per_second'])} ours vs "
                f"{_n(rllib['sampled_steps_per_second'])} RLlib ({_n(ratio.get('sampled_steps_per_second'), 1)}x), "
                f"CPU use {ours['cpu_utilization']:.0%} vs {rllib['cpu_utilization']:.0%}")
        if ours.get("target_seconds") is not None or rllib.get("target_seconds") is not None:
            reached = [f"{side['target_seconds']:.1f} s" if side.get("target_seconds") is not None else
                       "not reached" for side in (ours, rllib)]
            per_env = result.get("settings", {}).get("per_env", {}).get(summary["env"], {})
            target = per_env.get("target_return", result.get("settings", {}).get("target_return", 475))
            text += f", {target:g} reached in {reached[0]} ours vs {reached[1]} RLlib"
        parts.append(text)
    return "; ".join(parts)


def _pbt_vs_tune(result: dict[str, Any]) -> str:
    summary = result.get("summary", {})
    if "records" not in result and "median_ratio" in summary:  # several seeds
        return (f"ours {summary['median_ratio']:.1f}x faster than Tune by the median over seeds "
                f"{list(result.get('by_seed', {}))} (from {summary['min_ratio']:.1f}x to {summary['max_ratio']:.1f}x)")
    cap = result.get("settings", {}).get("cap_seconds")
    shown = []
    for side, record in result.get("records", {}).items():
        times = [t for t in record.get("reached_seconds", []) if t is not None]
        shown.append(f"{side} {min(times):.0f} s" if times else f"{side} not by the cap ({cap:g} s)"
                     if cap else f"{side} not reached")
    ratio = result.get("summary", {}).get("tune_over_ours_at_least")
    target = result.get("settings", {}).get("target_return", 475)
    return (f"{target:g} first reached: " + ", ".join(shown)
            + (f"; ours {ratio:.1f}x faster than Tune" + ("" if result["summary"].get("tune_over_ours") else
                                                            " (at least)") if ratio else ""))


def _broadcast(result: dict[str, Any]) -> str:
    parts = []
    for mode, block in result.items():
        if isinstance(block, dict) and block.get("rows"):
            row = block["rows"][-1]
            parts.append(f"{block.get('link_mode', mode)}, {row['receivers']} receivers: flat "
                         f"{row['flat_median_ms']:.1f} ms, tree {row['tree_median_ms']:.1f} ms, MPI "
                         + (f"{row['mpi_median_ms']:.1f} ms" if "mpi_median_ms" in row else "n/a"))
    return "; ".join(parts)


def _staleness(result: dict[str, Any]) -> str:
    rows = result.get("rows", [])
    most = max((r["actors"] for r in rows), default=None)
    cells = [f"{r['broadcast']} {r['staleness_mean']:.2f} (max {r['staleness_max']:.0f})" for r in rows
             if r["actors"] == most]
    return f"staleness at {most} actors: " + ", ".join(cells) if rows else "no rows"


def _sampling_hosts(result: dict[str, Any]) -> str:
    by_broadcast: dict[str, list[dict[str, Any]]] = {}
    for row in result.get("table", []):
        by_broadcast.setdefault(row["broadcast"], []).append(row)
    return "; ".join(f"{broadcast}: " + " / ".join(_n(r["env steps/s"]) for r in rows) + " env steps/s on "
                     + " / ".join(str(r["hosts"]) for r in rows) + " hosts" for broadcast, rows in by_broadcast.items())


def _scale_model(result: dict[str, Any]) -> str:
    last = result["prediction"][-1]
    return (f"at {last['cores']:,} cores: staleness flat {last['flat_staleness']:.1f}, tree "
            f"{last['tree_staleness']:.1f}; latency flat {last['flat_ms'] / 1e3:.2f} s, tree "
            f"{last['tree_ms'] / 1e3:.2f} s; {result.get('checks_within_tolerance', '?')} checks within 20%")


RUN_READERS: dict[str, Callable[[Any], list[str]]] = {
    "train": _train_run, "nsga2": _nsga2_run, "pbt": _pbt_run, "emogi": _emogi_run, "league": _league_run}
JSON_READERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "sampling": _sampling, "raw_bound": _raw_bound, "nsga2_vs_pymoo": _nsga2_vs_pymoo, "vs_rllib": _vs_rllib,
    "pbt_vs_tune": _pbt_vs_tune, "broadcast": _broadcast, "staleness": _staleness,
    "sampling_hosts": _sampling_hosts, "scale_model": _scale_model}
READERS = {*RUN_READERS, *JSON_READERS}


def headline(experiment: Any, out: Path) -> str:
    """One line of what `experiment` (a `reproduce.Experiment`: its `result` file and `reader`)
    measured, from what it wrote into OUT; never raises."""
    path = out / experiment.result
    if not path.exists():
        return f"no {experiment.result} in the results folder"
    try:
        if experiment.reader in RUN_READERS:
            return _read_run(path, RUN_READERS[experiment.reader]) or "an empty run file"
        return JSON_READERS[experiment.reader](json.loads(path.read_text())) or f"nothing to show in {path.name}"
    except Exception as error:  # noqa: BLE001 - a table cell, whatever the file holds
        return f"could not read {experiment.result}: {type(error).__name__}: {error}"[:200]
