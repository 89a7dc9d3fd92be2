"""Benchmark results (`benchmarks/results/*.json`) as DataFrames, for the report's figures and
side-by-side tables.

Each benchmark script writes its own JSON layout; this module knows the ones in `benchmarks/`
and reads any other file as a generic list of records, so a new benchmark appears in the report
as a table before anyone writes a figure for it. Nothing here runs a benchmark.

A results file holds labelled entries, one per run kept (benchmarks/common.py writes them):
`{"benchmark": NAME, "entries": [{"label": "main", ...}, {"label": "quiet", ...}]}`. Entry
`main` is known by the file's stem (`pbt_vs_tune`), every other one as `STEM:LABEL`
(`pbt_vs_tune:quiet`); a file of the older layout (one bare result) is its entry `main`.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd

#: Files the report knows by name (stem of the JSON file in a results folder).
KNOWN_BENCHMARKS = ("sampling", "raw_bound", "vs_rllib", "nsga2_vs_pymoo", "broadcast", "staleness",
                    "pbt_vs_tune", "pong_steps", "scale_model")
#: The label of a results file's entry known by the file's stem alone.
MAIN_LABEL = "main"
COUNT_KEYS = ("receivers", "num_actors", "actors", "cores", "nodes")
VARIANTS = ("flat", "tree")


def find_benchmark_files(directory: str | Path) -> dict[str, Path]:
    """JSON results under `directory` (the folder itself, `results/` or `benchmarks/results/`),
    by stem; the first found wins."""
    directory = Path(directory)
    found: dict[str, Path] = {}
    for folder in (directory, directory / "results", directory / "benchmarks", directory / "benchmarks" / "results"):
        if folder.is_dir():
            for path in sorted(folder.glob("*.json")):
                found.setdefault(path.stem, path)
    return found


def results_entries(data: Any) -> list[dict[str, Any]]:
    """The labelled entries of a results file's parsed JSON (see the module's docstring)."""
    if isinstance(data, dict) and isinstance(data.get("entries"), list):
        return data["entries"]
    return [{"label": MAIN_LABEL, **data}] if isinstance(data, dict) else [{"label": MAIN_LABEL, "rows": data}]


def entry_name(stem: str, label: str) -> str:
    """What entry `label` of results file `stem` is known as: the stem for `main`, else STEM:LABEL."""
    return stem if label == MAIN_LABEL else f"{stem}:{label}"


def results_by_name(stem: str, data: Any) -> dict[str, dict[str, Any]]:
    """Every entry of one results file by the name it is known as (`entry_name`)."""
    return {entry_name(stem, str(entry.get("label", MAIN_LABEL))): entry for entry in results_entries(data)}


def read_results(path: str | Path, label: str = MAIN_LABEL) -> dict[str, Any]:
    """Entry `label` of the results file at `path` (KeyError when it has none)."""
    for entry in results_entries(json.loads(Path(path).read_text())):
        if entry.get("label", MAIN_LABEL) == label:
            return entry
    raise KeyError(f"{path}: no entry labelled {label!r}")


def load_benchmarks(directory: str | Path) -> dict[str, Any]:
    """Every entry of every results file found, by name (`entry_name`); unreadable files are left out."""
    results: dict[str, Any] = {}
    for name, path in find_benchmark_files(directory).items():
        try:
            results.update(results_by_name(name, json.loads(path.read_text())))
        except (OSError, ValueError):
            continue
    return results


def _median(values: Any) -> float | None:
    if isinstance(values, list):
        numbers = [value for value in values if isinstance(value, (int, float))]
        return statistics.median(numbers) if numbers else None
    return float(values) if isinstance(values, (int, float)) else None


def sampling_frame(sampling: dict[str, Any]) -> pd.DataFrame:
    """benchmarks/scale/sampling.py: env, cores (actor processes), sampled steps/s, staleness, CPU use."""
    rows = [{
        "env": row.get("env"), "cores": row.get("num_actors"),
        "steps_per_second": row.get("steps_per_second"), "staleness_mean": row.get("staleness_mean"),
        "cpu_utilization": row.get("cpu_utilization"), "ratio_to_raw": row.get("ratio_to_raw"),
    } for row in sampling.get("results", [])]
    return pd.DataFrame(rows, columns=["env", "cores", "steps_per_second", "staleness_mean", "cpu_utilization",
                                       "ratio_to_raw"])


def sampling_hosts_frame(result: dict[str, Any]) -> pd.DataFrame:
    """benchmarks/scale/sampling_hosts.py: env steps/s and staleness against emulated hosts, per layout,
    a host being `actors_per_host` actor processes on a quota of `host_cpus` cores (when set)."""
    quota = result.get("host_cpus")
    per_host = result.get("actors_per_host") or 1
    rows = [{"env": result.get("env"), "hosts": point.get("hosts"), "cores": point.get("actors", point.get("hosts")),
             "broadcast": point.get("broadcast"), "host_cpus": quota,
             "steps_per_second": point.get("steps_per_second"), "staleness_mean": point.get("staleness_mean"),
             "staleness_max": point.get("staleness_max")}
            for point in result.get("points", []) if "failed" not in point]
    return pd.DataFrame(rows, columns=["env", "hosts", "cores", "broadcast", "host_cpus", "steps_per_second",
                                       "staleness_mean", "staleness_max"]).assign(actors_per_host=per_host)


def broadcast_frame(broadcast: dict[str, Any]) -> pd.DataFrame:
    """benchmarks/scale/broadcast.py: median time for a weight blob to reach all receivers, per link mode."""
    rows = []
    for mode, block in broadcast.items():
        if not isinstance(block, dict):
            continue
        for row in block.get("rows", []):
            rows.append({"link_mode": block.get("link_mode", mode), "link_rate": block.get("link_rate"),
                         "receivers": row.get("receivers"), "nodes": row.get("nodes"),
                         "flat_ms": row.get("flat_median_ms"), "tree_ms": row.get("tree_median_ms"),
                         "mpi_ms": row.get("mpi_median_ms")})
    return pd.DataFrame(rows, columns=["link_mode", "link_rate", "receivers", "nodes", "flat_ms", "tree_ms", "mpi_ms"])


def _records(value: Any) -> Iterator[dict[str, Any]]:
    """Every dict found anywhere in a JSON tree."""
    if isinstance(value, dict):
        yield value
        for child in value.values():
            yield from _records(child)
    elif isinstance(value, list):
        for child in value:
            yield from _records(child)


def staleness_frame(staleness: Any) -> pd.DataFrame:
    """Staleness of flat vs tree broadcast against the receiver count, from a staleness benchmark's
    JSON: either rows naming their variant (`broadcast: flat`) or rows holding one dict per variant."""
    rows = []
    for record in _records(staleness):
        count_key = next((key for key in COUNT_KEYS if isinstance(record.get(key), (int, float))), None)
        if count_key is None:
            continue
        variant = next((record[key] for key in ("broadcast", "variant", "mode", "topology")
                        if record.get(key) in VARIANTS), None)
        if variant is not None and "staleness_mean" in record:
            rows.append({"receivers": record[count_key], "broadcast": variant,
                         "staleness_mean": _median(record["staleness_mean"]),
                         "staleness_max": _median(record.get("staleness_max"))})
            continue
        for name in VARIANTS:
            inner = record.get(name)
            if isinstance(inner, dict) and "staleness_mean" in inner:
                rows.append({"receivers": record[count_key], "broadcast": name,
                             "staleness_mean": _median(inner["staleness_mean"]),
                             "staleness_max": _median(inner.get("staleness_max"))})
    frame = pd.DataFrame(rows, columns=["receivers", "broadcast", "staleness_mean", "staleness_max"])
    frame = frame.dropna(subset=["staleness_mean"]).drop_duplicates().reset_index(drop=True)
    return frame.assign(source="benchmark")


def scale_model_frame(scale_model: dict[str, Any]) -> pd.DataFrame:
    """benchmarks/scale/scale_model.py: predicted throughput, latency, staleness and the learner's
    connections and memory, flat vs tree, against cores (the columns an older file lacks left out)."""
    columns = ["cores", "nodes", "fanout", "flat_ms", "tree_ms", "flat_staleness", "tree_staleness"]
    optional = ["flat_steps_per_s", "tree_steps_per_s", "flat_connections", "tree_connections",
                "flat_learner_mib", "tree_learner_mib"]
    rows = [{column: row.get(column) for column in columns + optional} for row in scale_model.get("prediction", [])]
    frame = pd.DataFrame(rows, columns=columns + optional)
    return frame.drop(columns=[column for column in optional if frame[column].isna().all()])


def vs_rllib_frame(vs_rllib: dict[str, Any]) -> pd.DataFrame:
    """benchmarks/peers/vs_rllib.py: ours, RLlib and the ratio side by side, per env."""
    rows = []
    for summary in vs_rllib.get("summaries", []):
        for side in ("ours", "rllib", "ratio"):
            values = summary.get(side) or {}
            rows.append({"env": summary.get("env"), "side": {"ratio": "ours / RLlib", "rllib": "RLlib"}.get(side, side),
                         "sampled_steps_per_second": values.get("sampled_steps_per_second"),
                         "trained_steps_per_second": values.get("trained_steps_per_second"),
                         "cpu_utilization": values.get("cpu_utilization"),
                         "time_to_target_seconds": values.get("target_seconds")})
    return pd.DataFrame(rows)


def nsga2_vs_pymoo_frame(comparison: dict[str, Any]) -> pd.DataFrame:
    """benchmarks/peers/nsga2_vs_pymoo.py: hypervolume (mean, std over seeds) and ms per generation."""
    rows = []
    for row in comparison.get("rows", []):
        hv = pd.Series(row.get("hv", []), dtype=float)
        seconds = pd.Series(row.get("seconds_per_generation", []), dtype=float)
        rows.append({"problem": row.get("problem"), "side": row.get("side"), "generations": row.get("generations"),
                     "hv_mean": hv.mean(), "hv_std": hv.std(ddof=0), "ms_per_generation": 1000 * seconds.mean()})
    return pd.DataFrame(rows)


def pbt_vs_tune_frame(comparison: dict[str, Any]) -> pd.DataFrame:
    """benchmarks/peers/pbt_vs_tune.py: per seed and side, when its first and median member reached the
    target (files of one seed before `by_seed` existed hold only `records`)."""
    by_seed = comparison.get("by_seed") or {str(comparison.get("settings", {}).get("seed", 0)):
                                            comparison.get("records") or {}}
    rows = []
    for seed, sides in by_seed.items():
        for side, record in sides.items():
            times = [value for value in record.get("reached_seconds", []) if isinstance(value, (int, float))]
            everyone = [value if isinstance(value, (int, float)) else float("inf")
                        for value in record.get("reached_seconds", [])]
            middle = statistics.median(everyone) if everyone else None
            rows.append({"seed": int(seed), "side": side, "first_member_seconds": min(times) if times else None,
                         "median_member_seconds": middle if middle is not None and middle != float("inf") else None,
                         "members_reached": len(times), "members": len(everyone), "error": record.get("error")})
    return pd.DataFrame(rows)


def records_frame(result: Any) -> pd.DataFrame:
    """Any results file: the longest list of flat records in it, scalar fields only."""
    best: list[dict[str, Any]] = []

    def visit(value: Any) -> None:
        nonlocal best
        if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
            if len(value) > len(best):
                best = value
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        for child in children:
            visit(child)

    visit(result)
    if not best and isinstance(result, dict):
        scalars = {key: value for key, value in result.items() if isinstance(value, (int, float, str, bool))}
        nested = {f"{key}.{inner}": value for key, block in result.items() if isinstance(block, dict)
                  for inner, value in block.items() if isinstance(value, (int, float, str, bool))}
        return pd.DataFrame([{**scalars, **nested}]) if scalars or nested else pd.DataFrame()
    return pd.DataFrame([{key: value for key, value in item.items() if isinstance(value, (int, float, str, bool))
                          or value is None} for item in best])


def benchmark_table(name: str, result: Any) -> pd.DataFrame:
    """The side-by-side table the report shows for one results file."""
    tables = {"sampling": sampling_frame, "broadcast": broadcast_frame, "staleness": staleness_frame,
              "vs_rllib": vs_rllib_frame, "nsga2_vs_pymoo": nsga2_vs_pymoo_frame, "scale_model": scale_model_frame,
              "pbt_vs_tune": pbt_vs_tune_frame}
    try:
        frame = tables[name](result) if name in tables else records_frame(result)
    except (AttributeError, TypeError, KeyError, ValueError):
        frame = records_frame(result)
    return frame
