"""The tables of the documentation's benchmark pages, generated from `benchmarks/results/*.json`.

The pages' prose (what a benchmark measures, how to run it, what its history was) is written by
hand; the figures are not. Each page marks where a results file's latest table goes:

    <!-- results: sampling -->
    ...replaced on every run...
    <!-- end results -->

so that a benchmark run followed by

    python -m lamarckian_hpc.analysis.benchmark_pages

brings every page up to date, and tests/test_docs.py fails when a committed page does not match
its results. A name is a results file's stem, with `:LABEL` for an entry other than its `main`
one (`pbt_vs_tune:quiet`, see analysis/benchmarks.py), and may carry a view
(`game_use_cases.testing`) for entries that hold several tables. The benchmarks draw their figures
straight into docs/benchmarks/figures/ (`FIGURES` of benchmarks/common.py), beside the pages, since
the site can only show files inside docs/; this module does not touch them.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from .benchmarks import MAIN_LABEL, benchmark_table, pbt_vs_tune_frame, results_by_name
from .tables import markdown_table

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
PAGES = ROOT / "docs" / "benchmarks"
MARKER = re.compile(r"(<!-- results: (?P<name>[\w.:]+) -->\n)(?P<body>.*?)(<!-- end results -->)", re.S)


def _testing(data: dict[str, Any]) -> pd.DataFrame:
    """Bugs per seed, search beside random play: the generic table would pick the imbalanced
    lineups, the file's longest list, and drop the nested bug maps."""

    def found(bugs: dict[str, int]) -> str:
        return ", ".join(f"{name} {episode}" for name, episode in sorted(bugs.items(), key=lambda item: item[1]))

    return pd.DataFrame([{"seed": row["seed"], "search: bugs (episode that found each)": f"{len(row['search'])}: "
                          + found(row["search"]), "random play, same budget": f"{len(row['random'])}: "
                          + found(row["random"]), "distinct states search / random":
                          f"{row['search_states']} / {row['random_states']}"} for row in data["testing"]])


def _game_timing(data: dict[str, Any]) -> pd.DataFrame:
    balancing = data["balancing"]
    return pd.DataFrame([{"battle (ms)": data["battle_ms"], "lineup evaluation (ms)": data["lineup_evaluation_ms"],
                          "memoised lineup (ms)": data["lineup_evaluation_memoised_ms"],
                          "balancing: population x generations": f"{balancing['population_size']} x "
                                                                 f"{balancing['generations']}",
                          "balancing wall time (s)": balancing["wall_seconds"], "front": balancing["front_size"],
                          "heroes to weaken (lineups)": ", ".join(f"{row['hero']} ({row['lineups']})"
                                                                  for row in balancing["heroes_to_weaken"])}])


def _exploitability(data: dict[str, Any]) -> pd.DataFrame:
    """Per fifth of training, self-play beside the league's mean and range over seeds: the file
    keeps them as bare lists, which a generic table cannot label."""
    league = list(zip(*data["league_windows"]))
    return pd.DataFrame([{"fifth of training": index + 1, "naive self-play": self_play,
                          "league main agent (mean)": statistics.mean(seeds), "min": min(seeds), "max": max(seeds)}
                         for index, (self_play, seeds) in enumerate(zip(data["self_play_windows"], league))])


def _pong(data: dict[str, Any]) -> pd.DataFrame:
    return pd.DataFrame([{"stepped through": name, "steps/s": rate} for name, rate in data["steps_per_second"].items()])


def _vs_rllib(data: dict[str, Any]) -> pd.DataFrame:
    target = (data.get("settings") or {}).get("target_return")
    columns = {"sampled_steps_per_second": "env steps/s sampled", "trained_steps_per_second": "env steps/s trained",
               "cpu_utilization": "CPU utilization", "peak_memory_bytes": "peak RSS sum (GB)",
               "peak_pss_bytes": "peak PSS (GB)",
               "first_update_seconds": "first update (s)", "target_seconds": f"time to {target:g} (s)" if target
               else "time to target (s)", "target_frames": "env steps to target", "score_rate": "score rate (end)"}
    if "per_env" in (data.get("settings") or {}):  # a file of one env's settings: the machine's load beside it
        columns = {**dict(list(columns.items())[:3]), "machine_cpu_utilization": "CPU busy (machine)",
                   **dict(list(columns.items())[3:])}
    else:
        del columns["target_frames"]  # the CartPole table keeps its columns
    rows = []
    for summary in data["summaries"]:
        for side, label in (("ours", "ours"), ("rllib", "RLlib"), ("ratio", "ours / RLlib")):
            values = summary.get(side) or {}
            row = {"env": summary["env"], "side": label}
            for key, title in columns.items():
                value = values.get(key)
                row[title] = value / 1e9 if key.startswith("peak_") and side != "ratio" and value else value
            rows.append(row)
        if "raw_bound" in summary:  # measured in the same run since the raw bound joined the benchmark
            share = summary["ours_of_raw_bound"]
            rows += [{"env": summary["env"], "side": "raw bound (no learning)",
                      columns["sampled_steps_per_second"]: summary["raw_bound"]["sampled_steps_per_second"]},
                     {"env": summary["env"], "side": "ours / raw bound",
                      columns["sampled_steps_per_second"]: share["sampled_steps_per_second"],
                      columns["trained_steps_per_second"]: share["trained_steps_per_second"]}]
    return pd.DataFrame(rows).dropna(axis=1, how="all")  # older files have RSS sums, newer PSS


def _score_curve(data: dict[str, Any]) -> pd.DataFrame:
    """The score rate of each side at common wall times and env steps (benchmarks/peers/vs_rllib.py's
    football comparisons): the file keeps them as maps of mark to value per side."""
    rows = []
    for summary in data["summaries"]:
        ours, rllib = summary.get("ours") or {}, summary.get("rllib") or {}
        for key, against in (("score_rate_at_seconds", "wall time (s)"), ("score_rate_at_frames", "env steps")):
            marks = dict.fromkeys([*ours.get(key, {}), *rllib.get(key, {})])
            rows += [{"env": summary["env"], "against": against, "at": int(mark), "ours": ours.get(key, {}).get(mark),
                      "RLlib": rllib.get(key, {}).get(mark)} for mark in marks]
    return pd.DataFrame(rows, columns=["env", "against", "at", "ours", "RLlib"])


def _scale_check(data: dict[str, Any]) -> pd.DataFrame:
    return pd.DataFrame(data["check"])


RANK_NAMES = {"cpu": "CPU", "gpu_today": "GPU", "gpu_projected": "GPU projected"}


def _scale_learners(data: dict[str, Any]) -> pd.DataFrame:
    """benchmarks/scale/scale_model.py's learner ranks: env steps/s at its cores, a row per learner count
    and a column per workload and kind of rank, then linear sampling's figure for each column."""
    rows = pd.DataFrame(data["learners"]["rows"])
    rows["column"] = rows["workload"] + " " + rows["ranks"].map(RANK_NAMES)
    table = rows.pivot_table(index="learners", columns="column", values="steps_per_s", sort=False).round(0)
    linear = rows.groupby("column", sort=False)["linear_steps_per_s"].first().round(0)
    table.loc["linear sampling"] = linear
    return table.reset_index()


def _scale_needed(data: dict[str, Any]) -> pd.DataFrame:
    """The fewest learner ranks within 90% of linear sampling per workload, kind of rank and case
    (batch, rollouts a message at the learner), or the best the model finds and where."""
    cells: dict[tuple[str, str], dict[str, str]] = {}
    for row in data["learners"]["needed"]:
        answer = (str(row["learners_needed"]) if row["learners_needed"] else
                  f"none: best {row['best_efficiency']:.1%} at {row['best_learners']} ({row['bound_there']})")
        # Each workload's batch differs: the case names the column, the batch goes in the cell.
        case = f"a {row['batch_policy']} per actor, {row['rollouts_per_message']} rollout(s)/message"
        answer = f"batch {row['batch']:,}: {answer}"
        cells.setdefault((row["workload"], RANK_NAMES[row["ranks"]]), {})[case] = answer
    return pd.DataFrame([{"workload": workload, "ranks": ranks, **answers}
                         for (workload, ranks), answers in cells.items()])


def _soak(data: dict[str, Any]) -> pd.DataFrame:
    return pd.DataFrame([data["summary"]])


def _fault_totals(data: dict[str, Any]) -> pd.DataFrame:
    return pd.DataFrame([{name.replace("_", " "): f"{count:,}" for name, count in data["tried"].items()}])


def _multiagent_vs_rllib(data: dict[str, Any]) -> pd.DataFrame:
    """benchmarks/peers/multiagent_vs_rllib.py: per policy setting, each side's medians, their ratio,
    and the raw bound of the machine with each side's share of it."""
    columns = {"sampled_steps_per_second": "env steps/s sampled", "trained_steps_per_second": "env steps/s trained",
               "cpu_utilization": "CPU utilization (tree)", "machine_cpu_utilization": "CPU busy (machine)",
               "driver_cores": "cores: driver", "workers_cores": "cores: env workers", "other_cores": "cores: Ray",
               "peak_pss_bytes": "peak PSS (GB)", "first_update_seconds": "first update (s)",
               "return_mean": "return per agent (end)"}
    rows = []
    for summary in data["summaries"]:
        for side, label in (("ours", "ours"), ("rllib", "RLlib"), ("ratio", "ours / RLlib")):
            values = summary.get(side) or {}
            row = {"policies": summary["setting"], "side": label}
            for key, title in columns.items():
                value = values.get(key)
                row[title] = value / 1e9 if key == "peak_pss_bytes" and side != "ratio" and value else value
            rows.append(row)
        raw = (summary.get("raw_bound") or {}).get("sampled_steps_per_second")
        if raw:
            rows.append({"policies": summary["setting"], "side": "raw bound (no learning)",
                         columns["sampled_steps_per_second"]: raw})
            for key, label in (("ours_of_raw_bound", "ours / raw bound"), ("rllib_of_raw_bound", "RLlib / raw bound")):
                rows.append({"policies": summary["setting"], "side": label,
                             **{columns[name]: summary[key][name] for name in summary[key]}})
    return pd.DataFrame(rows, columns=["policies", "side", *columns.values()])


def _every_fourth_row(data: dict[str, Any]) -> pd.DataFrame:
    """A learning curve of one row per update, thinned for the page (the last row kept)."""
    curve = data["curve"]
    return pd.DataFrame(curve[::4] + ([curve[-1]] if (len(curve) - 1) % 4 else []))


def _board_game_curve(data: dict[str, Any]) -> pd.DataFrame:
    """benchmarks/learning/league_connect_four.py: the main agent's win rate against the random player per
    evaluated generation, a column per seed (env frames of the first seed: the seeds differ by a
    few hundred)."""
    runs = data["runs"]
    frame = pd.DataFrame({"generation": runs[0]["generations"],
                          "env frames (all learners)": [f"{frames / 1000:.0f}k" for frames in runs[0]["env_frames"]]})
    for run in runs:
        frame[f"win rate vs random, seed {run['seed']}"] = [f"{rate:.2f}" for rate in run["win_rate"]]
    return frame


def _board_game_runs(data: dict[str, Any]) -> pd.DataFrame:
    """Per seed: the league's wall time, its moves outside the mask, and win rates against the
    win-or-block player."""
    return pd.DataFrame([{"seed": run["seed"], "league wall time (s)": f"{run['wall_seconds']:.0f}",
                          "moves outside the mask": run["illegal_actions"],
                          **{f"vs win-or-block: {name}": f"{rate:.2f}"
                             for name, rate in run["win_rate_vs_win_or_block"].items()}} for run in data["runs"]])


def _pbt_seeds(data: dict[str, Any]) -> pd.DataFrame:
    """benchmarks/peers/pbt_vs_tune.py --seeds: per seed, our start-up and time to the target, Tune's, and
    the ratio; the median over the seeds in the last row."""
    cap = data["settings"]["cap_seconds"]

    def first(record: dict[str, Any]) -> float | None:
        times = [value for value in record.get("reached_seconds", []) if value is not None]
        return min(times) if times else None

    rows = []
    for seed, sides in data["by_seed"].items():
        ours, tune = first(sides["ours"]), first(sides["tune"])
        rows.append({"seed": seed, "ours: start-up (s)": sides["ours"].get("training_start_seconds"),
                     "ours: best member reaches the target (s)": ours, "Tune reaches it (s)": tune,
                     "Tune / ours": None if ours is None else round((tune or cap) / ours, 2)})
    rows.append({"seed": "median", "Tune / ours": round(data["summary"]["median_ratio"], 2)})
    return pd.DataFrame(rows)


def _learner_ceiling(data: dict[str, Any]) -> pd.DataFrame:
    """benchmarks/scale/learner_ceiling.py: env steps trained per second, a column per label (before and
    after a change), and the last label over the first where there are two; a label that measured
    only some workloads (a change to the CNN alone) leaves the others' cells empty."""
    rows = pd.DataFrame(data["rows"])
    labels = list(dict.fromkeys(rows["label"]))
    table = rows.pivot_table(index=["workload", "algorithm", "threads"], columns="label", values="steps_per_second",
                             sort=False)[labels].reset_index()
    table.columns = ["workload", "algorithm", "threads", *(f"steps/s {label}" for label in labels)]
    for label in labels:
        table[f"steps/s {label}"] = table[f"steps/s {label}"].round(0)
    if len(labels) > 1:
        table[f"{labels[-1]} / {labels[0]}"] = (table[f"steps/s {labels[-1]}"] / table[f"steps/s {labels[0]}"]).round(2)
    return table


def _gpu_learner_ladder(data: dict[str, Any]) -> pd.DataFrame:
    """benchmarks/scale/gpu_learner_check.py: steps/s per workload, a column per GPU rung and the CPU's threads."""
    rows = pd.DataFrame([row for row in data["rows"] if "error" not in row])
    rows["column"] = [variant if device == "cuda" else f"cpu ({threads} threads)"
                      for variant, device, threads in zip(rows["variant"], rows["device"], rows["threads"])]
    columns = list(dict.fromkeys(rows["column"]))
    table = rows.pivot_table(index=["workload", "algorithm"], columns="column", values="steps_per_second",
                             sort=False)[columns].round(0).reset_index()
    return table


def _gpu_learner_summary(data: dict[str, Any]) -> pd.DataFrame:
    """The GPU learner's default (every path, `+graphs`) against the CPU's threads."""
    rows = [row for row in data["rows"] if "error" not in row]
    cpu = {(row["workload"], row["algorithm"]): row["steps_per_second"] for row in rows if row["device"] == "cpu"}
    return pd.DataFrame([{"workload": row["workload"], "algorithm": row["algorithm"],
                          "cuda steps/s": round(row["steps_per_second"]),
                          "cpu steps/s": round(cpu[(row["workload"], row["algorithm"])]),
                          "cuda / cpu": round(row["steps_per_second"] / cpu[(row["workload"], row["algorithm"])], 2)}
                         for row in rows if row["device"] == "cuda" and row["variant"] == "+graphs"
                         and (row["workload"], row["algorithm"]) in cpu])


#: learner_scaling.py's figures per point, in the order its page explains them.
LEARNER_SCALING_COLUMNS = ["workload", "ranks", "trained_steps_per_second", "speedup", "env_steps_per_second",
                           "staleness_mean", "staleness_max", "collective_ms", "agree_ms", "allreduce_ms",
                           "update_compute_ms", "update_ms", "updates"]


def _learner_scaling(data: dict[str, Any]) -> pd.DataFrame:
    """One row per point; the quota groups' throttled shares as one column: rank 0's (the learner's
    group), ranks 1.. (lhs-rankK), then the nodes' actors (lhtc-nodeK)."""
    def order(name: str) -> tuple[int, str]:
        return (0 if name.endswith("learner") else 1 if "rank" in name else 2, name)

    columns = LEARNER_SCALING_COLUMNS
    if data.get("batch_per_rank"):  # the global batch grows with the ranks: say how large each point's was
        columns = [*columns[:2], "batch_size", *columns[2:]]
    frame = pd.DataFrame(data["rows"]).reindex(columns=columns)
    frame["throttled share: rank 0, ranks 1.., nodes"] = [
        " / ".join(f"{row['quota_use'][name]['throttled_share']:.2f}" for name in sorted(row.get("quota_use", {}), key=order))
        for row in data["rows"]]
    return frame


def _learner_scaling_to_target(data: dict[str, Any]) -> pd.DataFrame:
    """Points run to a target return (`--target-return`): when each reached it."""
    return pd.DataFrame(data["rows"]).reindex(
        columns=["workload", "ranks", "reached", "frames_to_target", "seconds_to_target", "return_final",
                 "trained_steps_per_second", "staleness_mean", "staleness_max", "collective_ms", "updates"])


def _pong_learning_by_ranks(data: dict[str, Any]) -> pd.DataFrame:
    """Runs side by side that differ in their learner ranks: the score at the same env frames."""
    marks = {"500000": "return at 500k", "750000": "return at 750k", "1000000": "return at 1M",
             "1500000": "return at 1.5M"}
    frame = pd.DataFrame([{**run, **{label: run.get("return_at_frames", {}).get(mark) for mark, label in marks.items()}}
                          for run in data["runs"]])
    return frame.reindex(columns=["learners", "actors", "seed", "untrained_return", *marks.values(), "best_return",
                                  "frames_to_points", "env_frames", "wall_seconds", "frames_per_second",
                                  "staleness_mean"])


def _allreduce_under_quota(data: dict[str, Any]) -> pd.DataFrame:
    """One row per setting; the model's size and the compute per step where the entry records them
    per row (entries before `--parameters` kept them for the whole run)."""
    frame = pd.DataFrame(data["rows"])
    return frame[[c for c in ["ranks", "parameters", "compute_ms", "cpus", "period_us", "allreduce_ms", "step_ms"]
                  if c in frame]]


#: benchmarks/reliability/chaos.py's figures per fault, in the order its page explains them.
CHAOS_COLUMNS = ["name", "sampling", "hosts", "injected", "first_update_after_s", "longest_update_gap_after_s",
                 "staleness_under_2_after_s", "credits_in_flight_max_after", "credit_budget", "staleness_mean_after",
                 "lost_messages", "credits_written_off", "credits_late", "credits_reclaimed", "malformed_messages",
                 "incomplete_batches", "finished", "file_read_failures", "file_reads"]


#: Views that a file's generic table does not give.
VIEWS: dict[str, Callable[[dict[str, Any]], pd.DataFrame]] = {
    "game_use_cases.testing": _testing, "game_use_cases.timing": _game_timing, "league_rps": _exploitability,
    "pong_steps": _pong, "vs_rllib": _vs_rllib, "vs_rllib:pong_image": _vs_rllib,
    "vs_rllib:pong_image_float32": _vs_rllib,
    "vs_rllib:football_empty_goal_close": _vs_rllib, "vs_rllib:football_empty_goal_close.curve": _score_curve,
    "vs_rllib:football_11_vs_11_easy": _vs_rllib, "vs_rllib:football_11_vs_11_easy.curve": _score_curve,
    "scale_model.check": _scale_check, "scale_model.learners": _scale_learners,
    "scale_model.needed": _scale_needed, "soak": _soak,
    "allreduce": lambda data: pd.DataFrame(data["rows"]),
    "allreduce.calibration": lambda data: pd.DataFrame(data["fit"]["points"]),
    "faults.tried": _fault_totals,
    "learner_fuzz": lambda data: pd.DataFrame([data["result"]]).reindex(
        columns=["sent_bad", "malformed_messages", "sent_valid", "accepted", "learner_alive", "update_finite",
                 "distinct_mutations", "seconds"]),
    "learner_fuzz.mutations": lambda data: pd.DataFrame([data["result"]["mutations"]]),
    "chaos": lambda data: pd.DataFrame(data["rows"]).reindex(columns=CHAOS_COLUMNS),
    "pbt_vs_tune:run2": pbt_vs_tune_frame, "pbt_vs_tune:idle": pbt_vs_tune_frame,
    "pbt_vs_tune:quiet": pbt_vs_tune_frame, "pbt_vs_tune:batched": pbt_vs_tune_frame,
    "pbt_vs_tune:run6": pbt_vs_tune_frame, "pbt_vs_tune:run7": pbt_vs_tune_frame,
    "pbt_vs_tune:run7_seed1": pbt_vs_tune_frame, "pbt_vs_tune:run7_seed2": pbt_vs_tune_frame,
    "pbt_vs_tune:pong": pbt_vs_tune_frame,
    "batched_update": lambda data: pd.DataFrame(data["rows"])[["members", "threads", "one_by_one_ms", "batched_ms",
                                                               "batched_stack_only_ms", "speed_up"]],
    "learner_scaling": _learner_scaling,
    "learner_scaling:pong_image": _learner_scaling, "learner_scaling:pong_image_per_rank": _learner_scaling,
    "learner_scaling:curve": _learner_scaling_to_target, "learner_scaling:to_475": _learner_scaling_to_target,
    "allreduce_under_quota": _allreduce_under_quota, "allreduce_under_quota:cnn": _allreduce_under_quota,
    "learner_ranks_ceiling": lambda data: pd.DataFrame(data["rows"]).reindex(
        columns=["workload", "ranks", "batch", "shard", "update_seconds", "steps_per_second", "speed_up",
                 "collective_ms_per_update"]),
    "learner_ceiling": _learner_ceiling, "pbt_vs_tune:seeds": _pbt_seeds, "pbt_vs_tune:pong_seeds": _pbt_seeds,
    "learner_device": lambda data: pd.DataFrame(data["rows"]).reindex(
        columns=["cnn_layers", "device", "device_name", "threads", "batch", "update_seconds", "samples_per_second"]),
    **{stem: lambda data: pd.DataFrame(data["runs"]).reindex(
        columns=["cnn_layers", "cnn_precision", "seed", "untrained_return", "best_return", "final_return",
                 "frames_to_points", "seconds_to_points", "env_frames", "wall_seconds", "frames_per_second",
                 "final_entropy"]).fillna({"cnn_precision": "float32"})
       for stem in ("pong_image_learning", "pong_image_learning:bfloat16")},
    "pong_image_learning:learner_ranks": _pong_learning_by_ranks,
    "gpu_learner_check": _gpu_learner_ladder, "gpu_learner_check.summary": _gpu_learner_summary,
    "gpu_learner_check.transfers": lambda data: pd.DataFrame(data["transfers"]),
    "gpu_learner_check.extra": lambda data: pd.DataFrame(
        [row for row in data["rows"] if row["workload"] == "pong-nature" and row["algorithm"] == "ppo"
         and row["device"] == "cuda"]).reindex(columns=["variant", "update_seconds", "steps_per_second"]),
    "gpu_learner_check.repeat": lambda data: pd.DataFrame(data["repeat"]).reindex(
        columns=["round", "variant", "update_seconds", "spread_seconds", "steps_per_second"]),
    "trajectory_cost": lambda data: pd.DataFrame(data["results"]),
    "trajectory_cost.codecs": lambda data: pd.DataFrame(data["codecs"]),
    "trajectory_cost.actor_side": lambda data: pd.DataFrame(data["actor_side"]),
    "tensorboard_sink": lambda data: pd.DataFrame(data["results"]),
    "test_command": lambda data: pd.DataFrame([{"run": number, **run} for number, run in enumerate(data["runs"], 1)])
    .reindex(columns=["run", "pytest_seconds", "wall_seconds", "passed", "skipped"]),
    "multiagent_vs_rllib": _multiagent_vs_rllib,
    "league_connect_four": _board_game_curve, "league_connect_four.runs": _board_game_runs,
    "fan_in.calibration": lambda data: pd.DataFrame([data["calibration"]]),
    **{f"{stem}{view}": (lambda key: lambda data: pd.DataFrame(data[key]))(key)  # noqa: B023 (bound by the outer lambda)
       for stem in ("async_arena_share", "async_arena_share:retrain")
       for view, key in (("", "policies"), (".shares", "shares"))},
    **{f"{stem}.curve": _every_fourth_row for stem in ("async_arena_share", "async_arena_share:retrain")},
}


def _provenance(stem: str, data: Any) -> str:
    """Where and when the figures were measured, as far as the file says: on a shared machine they
    only compare within one run, so a reader needs to know which run a table is."""
    label = data.get("label", MAIN_LABEL) if isinstance(data, dict) else MAIN_LABEL
    source = f"`benchmarks/results/{stem}.json`" + ("" if label == MAIN_LABEL else f" (entry `{label}`)")
    if not isinstance(data, dict):
        return f"From {source}."
    machine = data.get("machine") if isinstance(data.get("machine"), dict) else {}
    when = data.get("time") or data.get("date")
    host = data.get("host") or (data.get("machine") if isinstance(data.get("machine"), str) else None) \
        or machine.get("host")
    cpus = data.get("cpus") or data.get("cores") or machine.get("cpu_count") or machine.get("cpus")
    load = data.get("load_average") or machine.get("load_average")
    parts = [f"From {source}"]
    if when:
        parts.append(f"measured {when}")
    if host or cpus:
        parts.append(f"on {host or 'a machine'}" + (f" with {cpus} CPUs" if cpus else ""))
    if load:
        parts.append("load average " + ", ".join(f"{value:.1f}" for value in load))
    if data.get("git_revision"):
        parts.append(f"code at {data['git_revision']}")
    return ", ".join(parts) + "."


def results_table(name: str, results: Path = RESULTS) -> str:
    """The Markdown that stands between a page's markers for results `name` (stem[:label][.view])."""
    entry = name.split(".", 1)[0]
    stem = entry.split(":", 1)[0]
    entries = results_by_name(stem, json.loads((results / f"{stem}.json").read_text()))
    if entry not in entries:
        raise KeyError(f"{name}: no entry {entry!r} in benchmarks/results/{stem}.json; it has {sorted(entries)}")
    data = entries[entry]
    frame = VIEWS[name](data) if name in VIEWS else benchmark_table(entry, data)
    return f"{markdown_table(frame, max_rows=100)}\n*{_provenance(stem, data)}*\n"


def render_page(text: str, results: Path = RESULTS) -> str:
    """A page with every marked table regenerated; the rest stays as written."""
    return MARKER.sub(lambda match: f"{match[1]}{results_table(match['name'], results)}{match[4]}", text)


def referenced_results(pages: Path = PAGES) -> set[str]:
    """Names (stem[:label]) of the results entries the pages show, for the test that none is left out."""
    return {match["name"].split(".", 1)[0] for page in pages.glob("*.md") for match in MARKER.finditer(page.read_text())}


def results_names(results: Path = RESULTS) -> set[str]:
    """Names (stem[:label]) of every entry of every results file."""
    return {name for path in results.glob("*.json") for name in results_by_name(path.stem, json.loads(path.read_text()))}


def update(pages: Path = PAGES, results: Path = RESULTS, check: bool = False) -> list[Path]:
    """Regenerate every page; with `check`, only report what is out of date."""
    stale = []
    for page in sorted(pages.glob("*.md")):
        text = page.read_text()
        if render_page(text, results) != text:
            stale.append(page)
            if not check:
                page.write_text(render_page(text, results))
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="regenerate the benchmark pages' tables from benchmarks/results")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when a page is out of date")
    args = parser.parse_args(argv)
    stale = update(check=args.check)
    for path in stale:
        print(f"{'out of date' if args.check else 'updated'}: {path.relative_to(ROOT)}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
