"""Reproduce the paper's experiments at a chosen scale into one results folder, then write the report.

    python benchmarks/reproduce.py                          # --scale small: about 25 minutes on 2 cores
    python benchmarks/reproduce.py --scale medium --out results/medium
    python benchmarks/reproduce.py --scale large --out results/large   # `paper` is the old name of large
    python benchmarks/reproduce.py --list                   # experiments and their commands
    python benchmarks/reproduce.py --task-index 3 --no-report   # one experiment (a Slurm array task)
    python benchmarks/reproduce.py --final --out DIR        # what reads other results (scale_model), the report
    python benchmarks/reproduce.py --report-only --out DIR      # the report of what DIR holds

Every experiment is a real command, run at every scale: `lamarckian-hpc train|evolve` writing its
HDF5 run file into OUT/runs, or a benchmark script writing its JSON into OUT (nothing is copied
from benchmarks/results/). The peer comparisons (vs_rllib, pbt_vs_tune) need RLlib and run with
`--peer-python` (default: this interpreter); when that interpreter cannot import `ray.rllib` their
rows say "not run: needs RLlib" (install it as the docstring of benchmarks/peers/vs_rllib.py says). The
image-Pong and Football comparisons also need their environment's extra in that interpreter
(ale-py and opencv, gfootball); without it their rows say which module is missing.
scale_model reads the sampling_hosts, broadcast and staleness results this run wrote into OUT, so
in a Slurm job array it runs in the dependent job (`--final`), after the array. sampling_hosts
(and through it scale_model) needs root: it emulates hosts in network namespaces.

OUT/experiments.md has a row per experiment: the paper's figure or table, the paper's reported
value, the headline figure measured here (read from the experiment's JSON or run file), where this
scale differs from the paper's, how the command ended, its wall time and the command. The report
is `lamarckian-hpc report OUT --out OUT/report`.

The file has three parts: the headline readers (`RUN_READERS`, `JSON_READERS`: one line of what
an experiment wrote, from its run file or its benchmark's JSON), the experiments (`EXPERIMENTS`:
what each measures, the paper's figure or table and reported value, where this machine's scale
differs, its command at every scale) and the runner (`main`).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import common

# The headline of each experiment: one line for its report, read from what the experiment wrote.

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
        entries = common.entries(json.loads(path.read_text()))
        result = next((entry for entry in entries if entry.get("label") == common.DEFAULT_LABEL), entries[-1])
        return JSON_READERS[experiment.reader](result) or f"nothing to show in {path.name}"
    except Exception as error:  # noqa: BLE001 - a table cell, whatever the file holds
        return f"could not read {experiment.result}: {type(error).__name__}: {error}"[:200]


# The experiments.

SCALES = ("small", "medium", "large")


@dataclass(frozen=True)
class Experiment:
    """One experiment: what it measures, what the paper reports for it, and its command at each scale."""

    name: str
    measures: str  # what this experiment measures here
    paper: str  # the paper's figure or table, numbered as the paper numbers them
    paper_value: str  # what the paper reports there, short
    differs: str  # where this scale differs from the paper's ({cores}: this machine's cores)
    commands: dict[str, list[str]]
    result: str  # what it writes, relative to OUT: the summary reader reads it
    reader: str  # which summary reader (a key of READERS)
    peer: bool = False  # a peer comparison: runs with --peer-python, needs ray.rllib
    needs: tuple[str, ...] = ()  # other modules its interpreter must import (an environment's extra)
    after: tuple[str, ...] = ()  # experiments whose results it reads (run after them; --final in an array)

    def __post_init__(self) -> None:
        if self.reader not in READERS:
            raise ValueError(f"{self.name}: no summary reader {self.reader!r}; known: {sorted(READERS)}")


def _train(config: str, name: str, *overrides: str) -> list[str]:
    return ["lamarckian-hpc", "train", f"configs/{config}", *overrides, "storage.directory={out}/runs",
            f"storage.run_name={name}"]


def _evolve(config: str, name: str, *overrides: str) -> list[str]:
    return ["lamarckian-hpc", "evolve", f"configs/{config}", *overrides, "storage.directory={out}/runs",
            f"storage.run_name={name}"]


def _scaled(small: list[str], medium: list[str], large: list[str]) -> dict[str, list[str]]:
    return {"small": small, "medium": medium, "large": large}


def _bench(script: str, name: str, *arguments: str) -> list[str]:
    return ["python", f"benchmarks/{script}.py", *arguments, "--output", f"{{out}}/{name}.json"]


def _ppo_actors(actors: int, broadcast: str, frames: int) -> list[str]:
    name = f"ppo_cartpole_{broadcast}_{actors}actors"
    return _train("ppo_cartpole.yaml", name, f"runtime.num_actors={actors}", f"runtime.broadcast={broadcast}",
                  *(["runtime.simulated_nodes=2"] if broadcast == "tree" else []), f"stop.total_env_steps={frames}",
                  "stop.target_return=null", "storage.metrics_interval_seconds=1")


FIG7_VALUE = ("Pendulum: 10k samples/s on 10 cores, about 2, 4, 8, 15x on 20, 40, 80, 160 cores; Image Pong "
              "CPU use 32.2% on 10 cores, 96.8% on 40 (Table IV)")
FIG7D_VALUE = ("flat broadcast (Lamarckian*): staleness rises sharply with the cores; tree: larger only from 4000 "
               "cores; RLlib (synchronous): 1 (plot only, no numbers)")


def _actors_experiment(actors: int, broadcast: str = "flat") -> Experiment:
    name = f"ppo_cartpole_{broadcast}_{actors}actors"
    if broadcast == "tree":
        return Experiment(
            name, "PPO with the relay tree over 2 simulated nodes: staleness and throughput beside flat",
            "Fig. 7d, Fig. 8 (Lamarckian vs Lamarckian*)", FIG7D_VALUE + "; tree trains better per frame (Fig. 8)",
            "2 actors on 2 nodes simulated on one machine of {cores} cores, CartPole-v1 (paper: Gfootball, "
            "2000-6000 cores on 40-core nodes)",
            _scaled(_ppo_actors(actors, broadcast, 30_000), _ppo_actors(actors, broadcast, 200_000),
                    _ppo_actors(actors, broadcast, 1_000_000)), f"runs/{name}.h5", "train")
    return Experiment(
        name, f"PPO throughput, staleness and CPU use with {actors} actor process{'es' if actors > 1 else ''}",
        "Fig. 7a-b, Table IV", FIG7_VALUE,
        f"CartPole-v1, {actors} actor{'s' if actors > 1 else ''} on {{cores}} cores, learner on the CPU (paper: "
        "Pendulum and Image Pong on 10-160 cores)",
        _scaled(_ppo_actors(actors, broadcast, 30_000), _ppo_actors(actors, broadcast, 200_000),
                _ppo_actors(actors, broadcast, 1_000_000)), f"runs/{name}.h5", "train")


def _league(updates: int) -> list[str]:
    return ["python", "benchmarks/reproduce.py", "--league-run", "{out}/runs/league_rps.h5", "--updates", str(updates)]


EXPERIMENTS: tuple[Experiment, ...] = (
    Experiment(
        "ppo_cartpole_serial", "PPO learning curve against frames and wall time, one process",
        "Fig. 8", "Gfootball PPO, 150M frames: Lamarckian trains about twice as fast as RLlib on 6000 cores",
        "CartPole-v1 to a mean return of 475, one process on {cores} cores (paper: Gfootball, 2000-6000 cores)",
        _scaled(_train("ppo_cartpole.yaml", "ppo_cartpole_serial", "runtime.mode=serial", "stop.total_env_steps=40000"),
                _train("ppo_cartpole.yaml", "ppo_cartpole_serial", "runtime.mode=serial"),
                _train("ppo_cartpole.yaml", "ppo_cartpole_serial", "runtime.mode=serial")),
        "runs/ppo_cartpole_serial.h5", "train"),
    _actors_experiment(1), _actors_experiment(2), _actors_experiment(2, "tree"), _actors_experiment(4),
    Experiment(
        "nsga2_zdt1", "NSGA-II Pareto front, lineage and hypervolume on ZDT1",
        "Fig. 11b", "NSGA-II three-objective game balancing (Rise to War): a Pareto set approximation, f2 > 2 "
        "imbalanced; about ten minutes per balancing loop (no front numbers)",
        "ZDT1 (2 objectives) instead of the commercial game's simulator, which is not public",
        _scaled(_evolve("nsga2_zdt1.yaml", "nsga2_zdt1", "runtime.mode=serial", "algorithm.generations=100"),
                _evolve("nsga2_zdt1.yaml", "nsga2_zdt1"), _evolve("nsga2_zdt1.yaml", "nsga2_zdt1")),
        "runs/nsga2_zdt1.h5", "nsga2"),
    Experiment(
        "pbt_ppo_cartpole", "PBT+PPO: best member, lineage and hyperparameters over time",
        "Fig. 9", "vector Pong PBT+PPO, 1G frames: 13x faster than RLlib on 6000 cores, competitive scores",
        "CartPole-v1, population 4, {cores} cores (paper: vector Pong, 2000-6000 cores)",
        _scaled(_evolve("pbt_ppo_cartpole.yaml", "pbt_ppo_cartpole", "runtime.mode=serial",
                        "algorithm.population_size=4", "algorithm.interval_env_frames=1024", "stop.total_env_frames=4096", "ppo.num_epochs=4"),
                _evolve("pbt_ppo_cartpole.yaml", "pbt_ppo_cartpole", "stop.total_env_frames=100000"),
                _evolve("pbt_ppo_cartpole.yaml", "pbt_ppo_cartpole")),
        "runs/pbt_ppo_cartpole.h5", "pbt"),
    Experiment(
        "emogi_pong", "EMOGI front: normalized score + activeness against score + laziness",
        "Fig. 10", "Pong agents of different activeness and laziness at similar normalized scores; corner agents "
        "less competitive (plot only, no numbers)",
        "the built-in vector Pong (5 points a game) on {cores} cores (paper: Atari Pong)",
        _scaled(_evolve("emogi_pong.yaml", "emogi_pong", "runtime.mode=serial", "algorithm.population_size=4",
                        "algorithm.generations=2", "algorithm.initial_env_frames=4096",
                        "algorithm.offspring_env_frames=2048", "algorithm.evaluation_episodes=2",
                        "ppo.batch_size=1024"),
                _evolve("emogi_pong.yaml", "emogi_pong", "algorithm.generations=2"),
                _evolve("emogi_pong.yaml", "emogi_pong")),
        "runs/emogi_pong.h5", "emogi"),
    Experiment(
        "league_rps", "league: payoff matrix, Elo over time, the main agent's exploitability",
        "none (not in the paper)", "-", "biased rock-paper-scissors, a matrix game: no environment to scale",
        _scaled(_league(600), _league(3000), _league(3000)), "runs/league_rps.h5", "league"),
    Experiment(
        "sampling", "sampling throughput against actor processes, with cheap updates (benchmark)",
        "Fig. 7a", "10k samples/s on 10 cores (Pendulum); about 2, 4, 8, 15x on 20, 40, 80, 160 cores",
        "CartPole-v1, 1-2 actor processes on {cores} cores (paper: Pendulum, 10-160 cores)",
        _scaled(_bench("scale/sampling", "sampling", "--actors", "1", "2", "--envs", "CartPole-v1", "--frames", "20000",
                       "--raw-frames", "10000"),
                _bench("scale/sampling", "sampling"),
                _bench("scale/sampling", "sampling", "--actors", "1", "2", "4", "8", "16", "32")),
        "sampling.json", "sampling"),
    Experiment(
        "raw_bound", "trainer sampling against this machine's raw bound (envs and inference, no learning)",
        "none (not in the paper)", "-", "a property of this machine ({cores} cores)",
        _scaled(_bench("scale/raw_bound", "raw_bound", "--frames", "10000", "--repeats", "1"),
                _bench("scale/raw_bound", "raw_bound"), _bench("scale/raw_bound", "raw_bound")),
        "raw_bound.json", "raw_bound"),
    Experiment(
        "nsga2_vs_pymoo", "our NSGA-II against pymoo's: hypervolume and time per generation on ZDT",
        "none (the NSGA-II of Fig. 11b; no pymoo comparison in the paper)", "-",
        "ZDT problems on {cores} cores; fewer seeds at small scale",
        _scaled(_bench("peers/nsga2_vs_pymoo", "nsga2_vs_pymoo", "--seeds", "1"),
                _bench("peers/nsga2_vs_pymoo", "nsga2_vs_pymoo"), _bench("peers/nsga2_vs_pymoo", "nsga2_vs_pymoo")),
        "nsga2_vs_pymoo.json", "nsga2_vs_pymoo"),
    Experiment(
        "vs_rllib", "ours against RLlib's PPO in the same run: env steps/s, CPU use, memory, time to 475",
        "Table IV; Figs. 7c, 8 (abstract)", "CPU use 32.2% vs RLlib's 10.7% on 10 cores, 96.8% vs 23.9% on 40 "
        "(Image Pong); sampling and training about 2x RLlib's on Gfootball",
        "CartPole-v1 (with Pendulum-v1 above small), 2 env workers on {cores} cores (paper: Image Pong on 10-160 "
        "cores, Gfootball on 2000-6000)",
        _scaled(_bench("peers/vs_rllib", "vs_rllib", "--envs", "CartPole-v1", "--max-seconds", "60", "--raw-frames", "50000"),
                _bench("peers/vs_rllib", "vs_rllib"), _bench("peers/vs_rllib", "vs_rllib", "--repeats", "3")),
        "vs_rllib.json", "vs_rllib", peer=True),
    Experiment(
        "vs_rllib_pong_image", "ours against RLlib's PPO on image Pong, Table III's CNN on both sides: env steps/s "
        "sampled and trained, CPU use of the cores, memory",
        "Table IV; Fig. 7b", "CPU use 32.2% vs RLlib's 10.7% on 10 cores, 96.8% vs 23.9% on 40 (Image Pong)",
        "ALE Pong from pixels, 2 env workers x 8 envs on {cores} cores, the CNN learner on one CPU thread (paper: "
        "10-160 cores, an A100 learner)",
        _scaled(_bench("peers/vs_rllib", "vs_rllib_pong_image", "--envs", "lamarckian/PongImage-v0", "--max-seconds", "150"),
                _bench("peers/vs_rllib", "vs_rllib_pong_image", "--envs", "lamarckian/PongImage-v0"),
                _bench("peers/vs_rllib", "vs_rllib_pong_image", "--envs", "lamarckian/PongImage-v0", "--repeats", "3")),
        "vs_rllib_pong_image.json", "vs_rllib", peer=True, needs=("ale_py", "cv2")),
    Experiment(
        "vs_rllib_football", "ours against RLlib's PPO on Google Research Football: env steps/s, CPU use, memory, "
        "score rate against frames and wall time",
        "Figs. 7c, 8", "sampling and training about 2x RLlib's on Gfootball (11 vs 11), 2000-6000 cores",
        "academy_empty_goal_close with simple115v2, 2 env workers x 8 envs on {cores} cores (paper: 11 vs 11 at "
        "2000-6000 cores)",
        _scaled(_bench("peers/vs_rllib", "vs_rllib_football", "--envs", "football:academy_empty_goal_close",
                       "--max-seconds", "150"),
                _bench("peers/vs_rllib", "vs_rllib_football", "--envs", "football:academy_empty_goal_close",
                       "football:11_vs_11_easy_stochastic"),
                _bench("peers/vs_rllib", "vs_rllib_football", "--envs", "football:academy_empty_goal_close",
                       "football:11_vs_11_easy_stochastic", "--repeats", "3")),
        "vs_rllib_football.json", "vs_rllib", peer=True, needs=("gfootball",)),
    Experiment(
        "pbt_vs_tune", "our PBT+PPO against Ray Tune's PBT over RLlib's PPO: time to a return of 475",
        "Fig. 9 (abstract)", "PBT+PPO 13x faster than RLlib's on vector Pong at 6000 cores",
        "CartPole-v1, population 4 on {cores} cores, each side capped (paper: vector Pong, 1G frames, 2000-6000 "
        "cores)",
        _scaled(_bench("peers/pbt_vs_tune", "pbt_vs_tune", "--cap-seconds", "200"),
                _bench("peers/pbt_vs_tune", "pbt_vs_tune"), _bench("peers/pbt_vs_tune", "pbt_vs_tune")),
        "pbt_vs_tune.json", "pbt_vs_tune", peer=True),
    Experiment(
        "pbt_vs_tune_pong", "our PBT+PPO against Ray Tune's PBT over RLlib's PPO on vector Pong: time to beat the "
        "scripted opponent by one point",
        "Fig. 9", "PBT+PPO 13x faster than RLlib's on vector Pong at 6000 cores",
        "lamarckian/Pong-v0 against the opponent of skill 0.6, to 5 points, population 4 on {cores} cores, "
        "learning rate and critic loss weight searched, each side capped (paper: 1G frames, 2000-6000 cores)",
        _scaled(_bench("peers/pbt_vs_tune", "pbt_vs_tune_pong", "--config", "configs/pbt_ppo_pong.yaml",
                       "--sides", "ours", "tune", "--cap-seconds", "400"),
                _bench("peers/pbt_vs_tune", "pbt_vs_tune_pong", "--config", "configs/pbt_ppo_pong.yaml"),
                _bench("peers/pbt_vs_tune", "pbt_vs_tune_pong", "--config", "configs/pbt_ppo_pong.yaml")),
        "pbt_vs_tune_pong.json", "pbt_vs_tune", peer=True),
    Experiment(
        "broadcast", "time for a 4 MB weight blob to reach every receiver: flat vs relay tree vs MPI Bcast",
        "Sec. III-B1 (Fig. 2)", "head node: flat O(n) traffic and delay, tree O(sqrt n) (analytical, no numbers)",
        "receivers in processes of one machine ({cores} cores) over loopback (paper: separate nodes); the MPI "
        "column needs mpiexec and mpi4py",
        _scaled(_bench("scale/broadcast", "broadcast", "--receivers", "4", "8", "--reps", "5"),
                _bench("scale/broadcast", "broadcast", "--receivers", "4", "8", "16", "32", "--reps", "10"),
                _bench("scale/broadcast", "broadcast", "--receivers", "4", "8", "16", "32", "64", "--reps", "20")),
        "broadcast.json", "broadcast"),
    Experiment(
        "staleness", "staleness of async PPO (4 MB model) with flat and tree broadcast, against actors",
        "Fig. 7d", FIG7D_VALUE,
        "2-4 actors on {cores} cores, nodes simulated on one machine, CartPole-v1 (paper: 2000-6000 cores)",
        _scaled(_bench("scale/staleness", "staleness", "--actors", "2", "4", "--frames", "8000"),
                _bench("scale/staleness", "staleness"),
                _bench("scale/staleness", "staleness", "--actors", "2", "4", "8", "16", "32", "--frames", "48000")),
        "staleness.json", "staleness"),
    Experiment(
        "sampling_hosts", "sampling and broadcast across emulated hosts: env steps/s against hosts, per-hop costs",
        "Fig. 7a-c", "near-linear: about 2, 4, 8, 15x from 10 to 160 cores; Gfootball about 17k samples/s on "
        "2000 cores, over 53k on 6000",
        "1-2 hosts emulated as network namespaces with 1 Gbit links, sharing this machine's {cores} cores; needs "
        "root (paper: real 40-core nodes)",
        _scaled(_bench("scale/sampling_hosts", "sampling_hosts", "--hosts", "1", "2", "--seconds", "12",
                       "--link-receivers", "1", "2", "--reps", "3", "--retries", "0", "--raw-frames", "10000"),
                _bench("scale/sampling_hosts", "sampling_hosts"),
                _bench("scale/sampling_hosts", "sampling_hosts", "--hosts", "1", "2", "4", "8")),
        "sampling_hosts.json", "sampling_hosts"),
    Experiment(
        "scale_model", "model of broadcast latency and staleness to 6000 cores, calibrated on this run's results",
        "Fig. 7d (to 6000 cores)", FIG7D_VALUE,
        "predicted for 10-6000 cores (40 per node) from this run's emulated hosts and loopback, not measured",
        {scale: ["python", "benchmarks/scale/scale_model.py", "--sampling-hosts", "{out}/sampling_hosts.json",
                 "--broadcast", "{out}/broadcast.json", "--staleness", "{out}/staleness.json",
                 "--output", "{out}/scale_model.json"] for scale in SCALES},
        "scale_model.json", "scale_model", after=("sampling_hosts", "broadcast", "staleness")),
)


# The runner.

ROOT = Path(__file__).resolve().parents[1]
SCALE_ALIASES = {"paper": "large"}  # the name of `large` before it was renamed
PAPER_SETUP = ("the paper: small-scale runs on 10-160 CPU cores, large-scale on 2000-6000, nodes of 40 Intel Xeon "
               "Gold 6148 cores, one A100 learner GPU, each figure averaged over 5 runs")
RLLIB_INSTALL = ("install RLlib there as the docstring of benchmarks/peers/vs_rllib.py says (e.g. `pip install --no-deps "
                 "dm_tree absl-py lz4 ormsgpack pyarrow tensorboardX \"pandas<3\" pytz tzdata` beside ray 2.60), "
                 "or pass --peer-python")


def league_run(path: Path, updates: int) -> None:
    """A league run file: AlphaStar-style league training on biased rock-paper-scissors (the setting
    of benchmarks/learning/league_rps.py), its state written to /league every 20 rounds."""
    from lamarckian_hpc.config import LeagueConfig
    from lamarckian_hpc.league import Role
    from lamarckian_hpc.league.matrix_game import BIASED_ROCK_PAPER_SCISSORS, exploitability, league_training, softmax
    from lamarckian_hpc.league.store import LeagueRunWriter

    config = LeagueConfig(capacity=128, snapshot_interval=20, exploiter_max_updates=40)
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = LeagueRunWriter(path, {"league": config.model_dump(), "algorithm": {"name": "league"},
                                    "problem": {"name": "biased_rock_paper_scissors"}},
                             ["main_exploitability"], league_capacity=config.capacity)

    def on_round(league, index: int) -> None:
        if index % 20 == 19:
            main = league.of_role(Role.MAIN_AGENT)[0]
            value = exploitability(BIASED_ROCK_PAPER_SCISSORS, softmax(league.members[main].params))
            writer.append("main_exploitability", value, env_frames=index + 1, policy_version=index + 1)
            writer.write_league(league)

    league_training(BIASED_ROCK_PAPER_SCISSORS, np.array([1.0, 0.0, -1.0]), updates, 0.1, config, seed=0,
                    on_round=on_round)
    writer.close()


def experiment_environment(python: str = sys.executable) -> dict[str, str]:
    """This process's environment with RAY_ADDRESS=local unless it names a cluster: `ray.init()`
    without an address joins whatever Ray instance another user last started on the node
    (/tmp/ray/ray_current_cluster); each experiment must start its own. The interpreter's folder
    comes first on PATH, as in an activated virtual environment (broadcast.py's `mpiexec`)."""
    environment = dict(os.environ)
    if not environment.get("RAY_ADDRESS"):
        environment["RAY_ADDRESS"] = "local"
    environment["PATH"] = os.pathsep.join([str(Path(python).parent), environment.get("PATH", "")])
    return environment


@functools.cache
def module_missing(python: str, module: str) -> str | None:
    """None when `python` imports `module`; otherwise why not, in one line."""
    try:
        probe = subprocess.run([python, "-c", f"import {module}"], capture_output=True, text=True, timeout=300,
                               cwd=ROOT, env=experiment_environment(python))
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"{python} did not run: {error}"
    if probe.returncode == 0:
        return None
    lines = probe.stderr.strip().splitlines()
    return lines[-1] if lines else f"exit {probe.returncode}"


def rllib_missing(python: str) -> str | None:
    return module_missing(python, "ray.rllib")


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def run_experiment(experiment: Experiment, scale: str, out: Path, timeout_seconds: float,
                   peer_python: str = sys.executable) -> dict[str, str]:
    """Runs one experiment; returns its line for OUT/experiments.md."""
    command = experiment.commands[scale]
    python = peer_python if experiment.peer else sys.executable
    row = {"name": experiment.name, "command": " ".join(command), "seconds": ""}
    missing = rllib_missing(python) if experiment.peer else None
    if missing is not None:
        how = f"not run: needs RLlib ({python} cannot import ray.rllib: {missing}; {RLLIB_INSTALL})"
    else:
        absent = [module for module in experiment.needs if module_missing(python, module) is not None]
        how = (f"not run: needs {', '.join(absent)} ({python} cannot import {absent[0]}: "
               f"{module_missing(python, absent[0])}; install the extra its environment names)") if absent else None
    if how is not None:
        print(f"[{experiment.name}] {how}", flush=True)
        return {**row, "how": how, "measured": "-"}
    argv = [part.replace("{out}", str(out)) for part in command]
    if argv[0] == "python":
        argv[0] = python
    elif argv[0] == "lamarckian-hpc":  # this interpreter and the package it imports (a clone's, with PYTHONPATH)
        argv[:1] = [python, "-m", "lamarckian_hpc"]
    print(f"[{experiment.name}] {' '.join(command)}" + (f" (with {python})" if experiment.peer else ""), flush=True)
    started = time.monotonic()
    log = out / "logs" / f"{experiment.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as stream:
        # Its own session, so that a command that outlives its time is stopped with its children.
        process = subprocess.Popen(argv, cwd=ROOT, stdout=stream, stderr=subprocess.STDOUT, start_new_session=True,
                                   env=experiment_environment(python))
        try:
            status = process.wait(timeout=timeout_seconds)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            status = None
    seconds = time.monotonic() - started
    how = ("ran" if status == 0 else f"FAILED (exit {status}, see logs/{experiment.name}.log)" if status is not None
           else f"STOPPED after {timeout_seconds:.0f} s (see logs/{experiment.name}.log)")
    print(f"[{experiment.name}] {how} in {seconds:.0f} s", flush=True)
    return {**row, "how": how, "seconds": f"{seconds:.0f}", "measured": headline(experiment, out)}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


TABLE_HEADER = ("| experiment | paper | paper's reported value | measured here | where this scale differs | how | "
                "wall time (s) | command |\n|---|---|---|---|---|---|---:|---|\n")


def write_experiments_table(rows: list[dict[str, str]], out: Path, scale: str) -> None:
    """Appends to OUT/experiments.md: array tasks each add their own row."""
    path = out / "experiments.md"
    try:
        with path.open("x") as stream:  # the first task to get here writes the header
            stream.write(f"# Experiments (scale {scale})\n\nOn {cores()} cores ({os.uname().nodename}); "
                         f"{PAPER_SETUP}. The paper's figure numbers are its own (Fig. 10: EMOGI, Fig. 11: NSGA-II "
                         "game balancing; the letters of Fig. 7a-c follow its text: Pendulum, Image Pong, "
                         "Gfootball).\n\n" + TABLE_HEADER)
    except FileExistsError:
        pass
    experiments = {experiment.name: experiment for experiment in EXPERIMENTS}
    with path.open("a") as stream:
        for row in rows:
            experiment = experiments[row["name"]]
            cells = [row["name"], experiment.paper, experiment.paper_value, row.get("measured", ""),
                     experiment.differs.format(cores=cores()), row["how"], row["seconds"],
                     f"`{row['command']}`" if row["command"] else ""]
            stream.write("| " + " | ".join(_cell(cell) for cell in cells) + " |\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=(*SCALES, *SCALE_ALIASES), default="small",
                        help="small: this machine (2 cores) in about 25 minutes; medium, large: a cluster node or "
                             "more (`paper` is large's old name)")
    parser.add_argument("--out", type=Path, default=None,
                        help="results folder (default runs/reproduce-<scale>, which git ignores)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these experiments")
    parser.add_argument("--task-index", type=int, help="run only experiment number K (SLURM_ARRAY_TASK_ID); one "
                                                       "that reads other experiments' results waits for --final")
    parser.add_argument("--final", action="store_true",
                        help="run only the experiments that read other experiments' results (after a job array)")
    parser.add_argument("--peer-python", default=sys.executable,
                        help="interpreter of the peer comparisons (vs_rllib, pbt_vs_tune), one that imports "
                             "ray.rllib (default: this one)")
    parser.add_argument("--timeout-seconds", type=float, default=1800.0,
                        help="stop an experiment (and its child processes) that runs longer than this")
    parser.add_argument("--no-report", action="store_true", help="do not write the report afterwards")
    parser.add_argument("--report-only", action="store_true", help="only write the report of what --out holds")
    parser.add_argument("--list", action="store_true", help="print the experiments and their commands, and exit")
    parser.add_argument("--count", action="store_true", help="print the number of experiments (array size), exit")
    parser.add_argument("--league-run", type=Path, help=argparse.SUPPRESS)  # the league_rps experiment
    parser.add_argument("--updates", type=int, default=600, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.league_run is not None:
        league_run(args.league_run, args.updates)
        return
    scale = SCALE_ALIASES.get(args.scale, args.scale)
    out = (args.out or ROOT / "runs" / f"reproduce-{scale}").resolve()
    if args.count:
        print(len(EXPERIMENTS))
        return
    if args.list:
        for index, experiment in enumerate(EXPERIMENTS):
            notes = (["with --peer-python, needs RLlib"] if experiment.peer else []) + (
                [f"needs {', '.join(experiment.needs)}"] if experiment.needs else []) + (
                [f"after {', '.join(experiment.after)}; --final in a job array"] if experiment.after else [])
            print(f"{index:2d} {experiment.name}: {' '.join(experiment.commands[scale])}"
                  + (f" ({'; '.join(notes)})" if notes else ""))
        return
    selected = list(EXPERIMENTS)
    if args.only:
        unknown = sorted(set(args.only) - {experiment.name for experiment in EXPERIMENTS})
        if unknown:
            parser.error(f"--only: unknown experiments {unknown}; known: {[e.name for e in EXPERIMENTS]}")
        selected = [experiment for experiment in EXPERIMENTS if experiment.name in args.only]
    if args.task_index is not None:
        if not 0 <= args.task_index < len(EXPERIMENTS):
            parser.error(f"--task-index must be in 0..{len(EXPERIMENTS) - 1}, got {args.task_index}")
        selected = [EXPERIMENTS[args.task_index]]
        if selected[0].after:
            print(f"[{selected[0].name}] reads the results of {', '.join(selected[0].after)}: it runs in the job "
                  "after the array (--final)")
            selected = []
    if args.final:
        selected = [experiment for experiment in EXPERIMENTS if experiment.after]
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    if not args.report_only and selected:
        rows = [run_experiment(experiment, scale, out, args.timeout_seconds, args.peer_python)
                for experiment in selected]
        write_experiments_table(rows, out, scale)
    if not args.no_report and (selected or args.report_only):
        report_command = [sys.executable, "-m", "lamarckian_hpc", "report", str(out), "--out", str(out / "report")]
        report = subprocess.run(report_command, cwd=ROOT)
        if report.returncode != 0:
            sys.exit(report.returncode)
    print(f"reproduce ({scale}): {time.monotonic() - started:.0f} s in all; results in {out}")


if __name__ == "__main__":
    main()
