"""Reproduce the paper's experiments at a chosen scale into one results folder, then write the report.

    python benchmarks/reproduce.py                          # --scale small: a few minutes on 2 cores
    python benchmarks/reproduce.py --scale medium --out results/medium
    python benchmarks/reproduce.py --list                   # experiments and their commands
    python benchmarks/reproduce.py --task-index 3 --no-report   # one experiment (a Slurm array task)
    python benchmarks/reproduce.py --report-only --out DIR      # the report of what DIR holds

Every experiment is a real command: `lamarckian-hpc train|evolve` writing its HDF5 run file into
OUT/runs, or a benchmark script writing its JSON into OUT. Benchmarks that are too long for the
scale, or that only write to benchmarks/results/ (broadcast, staleness, which other runs of them
share), are copied from benchmarks/results/ instead and marked `copied` in OUT/experiments.md,
with the date they were measured. The report is `lamarckian-hpc report OUT --out OUT/report`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SCALES = ("small", "medium", "paper")


@dataclass(frozen=True)
class Experiment:
    """One experiment: what it reproduces, and its command at each scale (None: copy its results)."""

    name: str
    reproduces: str
    commands: dict[str, list[str] | None]
    results_file: str | None = None  # benchmark JSON name in benchmarks/results/, for copies


def _train(config: str, name: str, *overrides: str) -> list[str]:
    return ["lamarckian-hpc", "train", f"configs/{config}", *overrides, "storage.directory={out}/runs",
            f"storage.run_name={name}"]


def _evolve(config: str, name: str, *overrides: str) -> list[str]:
    return ["lamarckian-hpc", "evolve", f"configs/{config}", *overrides, "storage.directory={out}/runs",
            f"storage.run_name={name}"]


def _scaled(small: list[str] | None, medium: list[str] | None, paper: list[str] | None) -> dict[str, list[str] | None]:
    return {"small": small, "medium": medium, "paper": paper}


def _ppo_actors(actors: int, broadcast: str, frames: int) -> list[str]:
    name = f"ppo_cartpole_{broadcast}_{actors}actors"
    return _train("ppo_cartpole.yaml", name, f"runtime.num_actors={actors}", f"runtime.broadcast={broadcast}",
                  *(["runtime.simulated_nodes=2"] if broadcast == "tree" else []), f"stop.total_env_steps={frames}",
                  "stop.target_return=null", "storage.metrics_interval_seconds=1")


EXPERIMENTS: tuple[Experiment, ...] = (
    Experiment("ppo_cartpole_serial", "Figs. 8-9: learning curve against frames and wall time", _scaled(
        _train("ppo_cartpole.yaml", "ppo_cartpole_serial", "runtime.mode=serial", "stop.total_env_steps=40000"),
        _train("ppo_cartpole.yaml", "ppo_cartpole_serial", "runtime.mode=serial"),
        _train("ppo_cartpole.yaml", "ppo_cartpole_serial", "runtime.mode=serial"))),
    Experiment("ppo_cartpole_flat_1actors", "Fig. 7: throughput, staleness and CPU use against cores", _scaled(
        _ppo_actors(1, "flat", 30_000), _ppo_actors(1, "flat", 200_000), _ppo_actors(1, "flat", 1_000_000))),
    Experiment("ppo_cartpole_flat_2actors", "Fig. 7: throughput, staleness and CPU use against cores", _scaled(
        _ppo_actors(2, "flat", 30_000), _ppo_actors(2, "flat", 200_000), _ppo_actors(2, "flat", 1_000_000))),
    Experiment("ppo_cartpole_tree_2actors", "Fig. 7d: tree against flat broadcast (runs)", _scaled(
        _ppo_actors(2, "tree", 30_000), _ppo_actors(2, "tree", 200_000), _ppo_actors(2, "tree", 1_000_000))),
    Experiment("ppo_cartpole_flat_4actors", "Fig. 7: throughput against cores", _scaled(
        None, _ppo_actors(4, "flat", 200_000), _ppo_actors(4, "flat", 1_000_000))),
    Experiment("nsga2_zdt1", "Fig. 10: NSGA-II Pareto front on ZDT1", _scaled(
        _evolve("nsga2_zdt1.yaml", "nsga2_zdt1", "runtime.mode=serial", "algorithm.generations=100"),
        _evolve("nsga2_zdt1.yaml", "nsga2_zdt1"), _evolve("nsga2_zdt1.yaml", "nsga2_zdt1"))),
    Experiment("pbt_ppo_cartpole", "Fig. 9 and lineage: PBT+PPO, hyperparameters over time", _scaled(
        _evolve("pbt_ppo_cartpole.yaml", "pbt_ppo_cartpole", "runtime.mode=serial", "algorithm.population_size=4",
                "algorithm.interval_env_frames=1024", "stop.total_env_frames=4096", "ppo.num_epochs=4"),
        _evolve("pbt_ppo_cartpole.yaml", "pbt_ppo_cartpole", "stop.total_env_frames=100000"),
        _evolve("pbt_ppo_cartpole.yaml", "pbt_ppo_cartpole"))),
    Experiment("emogi_pong", "Fig. 11b: EMOGI front (score+activeness vs score+laziness)", _scaled(
        _evolve("emogi_pong.yaml", "emogi_pong", "runtime.mode=serial", "algorithm.population_size=4",
                "algorithm.generations=2", "algorithm.initial_env_frames=4096", "algorithm.offspring_env_frames=2048",
                "algorithm.evaluation_episodes=2", "ppo.batch_size=1024"),
        _evolve("emogi_pong.yaml", "emogi_pong", "algorithm.generations=2"),
        _evolve("emogi_pong.yaml", "emogi_pong"))),
    Experiment("league_rps", "League: payoff matrix and Elo over time (biased rock-paper-scissors)", _scaled(
        ["python", "benchmarks/reproduce.py", "--league-run", "{out}/runs/league_rps.h5", "--updates", "600"],
        ["python", "benchmarks/reproduce.py", "--league-run", "{out}/runs/league_rps.h5", "--updates", "3000"],
        ["python", "benchmarks/reproduce.py", "--league-run", "{out}/runs/league_rps.h5", "--updates", "3000"])),
    Experiment("sampling", "Fig. 7: sampling throughput against actor processes (benchmark)", _scaled(
        ["python", "benchmarks/sampling.py", "--actors", "1", "2", "--envs", "CartPole-v1", "--frames", "20000",
         "--raw-frames", "10000", "--output", "{out}/sampling.json"],
        ["python", "benchmarks/sampling.py", "--output", "{out}/sampling.json"],
        ["python", "benchmarks/sampling.py", "--actors", "1", "2", "4", "8", "16", "32", "--output",
         "{out}/sampling.json"]), "sampling"),
    Experiment("raw_bound", "Sampling against the raw bound of the machine", _scaled(
        ["python", "benchmarks/raw_bound.py", "--frames", "10000", "--repeats", "1",
         "--output", "{out}/raw_bound.json"],
        ["python", "benchmarks/raw_bound.py", "--output", "{out}/raw_bound.json"],
        ["python", "benchmarks/raw_bound.py", "--output", "{out}/raw_bound.json"]), "raw_bound"),
    Experiment("nsga2_vs_pymoo", "Ours vs pymoo: NSGA-II hypervolume and time per generation", _scaled(
        ["python", "benchmarks/nsga2_vs_pymoo.py", "--seeds", "1", "--output", "{out}/nsga2_vs_pymoo.json"],
        ["python", "benchmarks/nsga2_vs_pymoo.py", "--output", "{out}/nsga2_vs_pymoo.json"],
        ["python", "benchmarks/nsga2_vs_pymoo.py", "--output", "{out}/nsga2_vs_pymoo.json"]), "nsga2_vs_pymoo"),
    Experiment("vs_rllib", "Table IV and ours vs RLlib (needs RLlib's extras, see README)", _scaled(
        None, ["python", "benchmarks/vs_rllib.py", "--output", "{out}/vs_rllib.json"],
        ["python", "benchmarks/vs_rllib.py", "--repeats", "3", "--output", "{out}/vs_rllib.json"]), "vs_rllib"),
    Experiment("pbt_vs_tune", "Ours vs Ray Tune's PBT (needs RLlib's extras)", _scaled(
        None, ["python", "benchmarks/pbt_vs_tune.py", "--output", "{out}/pbt_vs_tune.json"],
        ["python", "benchmarks/pbt_vs_tune.py", "--output", "{out}/pbt_vs_tune.json"]), "pbt_vs_tune"),
    # These two write only benchmarks/results/ (shared with their own runs): copied at every scale;
    # run `python benchmarks/broadcast.py` / `python benchmarks/staleness.py` to refresh them.
    Experiment("broadcast", "Fig. 7d: relay tree vs flat vs MPI Bcast", _scaled(None, None, None), "broadcast"),
    Experiment("staleness", "Fig. 7d: staleness of flat vs tree broadcast", _scaled(None, None, None), "staleness"),
    Experiment("scale_model", "Fig. 7d to 6000 cores: the scale model calibrated on the broadcast and staleness "
               "results", _scaled(None, None, None), "scale_model"),
)


def _measured_at(path: Path) -> str:
    try:
        result = json.loads(path.read_text())
    except (OSError, ValueError):
        return "unknown date"
    blocks = [result, *(value for value in result.values() if isinstance(value, dict))]
    return next((str(block[key]) for block in blocks for key in ("date", "time") if key in block), "unknown date")


def league_run(path: Path, updates: int) -> None:
    """A league run file: AlphaStar-style league training on biased rock-paper-scissors (the setting
    of benchmarks/league_rps.py), its state written to /league every 20 rounds."""
    from lamarckian_hpc.config import LeagueConfig
    from lamarckian_hpc.league import Role
    from lamarckian_hpc.league.matrix_game import (BIASED_ROCK_PAPER_SCISSORS, exploitability, league_training,
                                                   softmax)
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


def experiment_environment() -> dict[str, str]:
    """This process's environment with RAY_ADDRESS=local unless it names a cluster: `ray.init()`
    without an address joins whatever Ray instance another user last started on the node
    (/tmp/ray/ray_current_cluster); each experiment must start its own."""
    environment = dict(os.environ)
    if not environment.get("RAY_ADDRESS"):
        environment["RAY_ADDRESS"] = "local"
    return environment


def run_experiment(experiment: Experiment, scale: str, out: Path, timeout_seconds: float) -> dict[str, str]:
    """Runs (or copies) one experiment; returns its line for OUT/experiments.md."""
    command = experiment.commands[scale]
    if command is None:
        source = RESULTS / f"{experiment.results_file}.json" if experiment.results_file else None
        if source is None or not source.exists():
            return {"name": experiment.name, "how": "skipped (no command at this scale, no stored result)",
                    "command": "", "seconds": ""}
        shutil.copy(source, out / source.name)
        return {"name": experiment.name, "how": f"copied from benchmarks/results/ (measured {_measured_at(source)})",
                "command": "", "seconds": ""}
    argv = [part.replace("{out}", str(out)) for part in command]
    if argv[0] == "python":
        argv[0] = sys.executable
    elif argv[0] == "lamarckian-hpc":  # this interpreter and the package it imports (a clone's, with PYTHONPATH)
        argv[:1] = [sys.executable, "-m", "lamarckian_hpc"]
    print(f"[{experiment.name}] {' '.join(command)}", flush=True)
    started = time.monotonic()
    log = out / "logs" / f"{experiment.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as stream:
        # Its own session, so that a command that outlives its time is stopped with its children.
        process = subprocess.Popen(argv, cwd=ROOT, stdout=stream, stderr=subprocess.STDOUT, start_new_session=True,
                                   env=experiment_environment())
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
    return {"name": experiment.name, "how": how, "command": " ".join(command), "seconds": f"{seconds:.0f}"}


def write_experiments_table(rows: list[dict[str, str]], out: Path, scale: str) -> None:
    """Appends to OUT/experiments.md: array tasks each add their own row."""
    path = out / "experiments.md"
    if not path.exists():
        path.write_text(f"# Experiments (scale {scale})\n\n"
                        "| experiment | reproduces | how | wall time (s) | command |\n|---|---|---|---:|---|\n")
    reproduces = {experiment.name: experiment.reproduces for experiment in EXPERIMENTS}
    with path.open("a") as stream:
        for row in rows:
            stream.write(f"| {row['name']} | {reproduces[row['name']]} | {row['how']} | {row['seconds']} | "
                         f"`{row['command']}` |\n" if row["command"] else
                         f"| {row['name']} | {reproduces[row['name']]} | {row['how']} | | |\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=SCALES, default="small", help="small: this machine in a few minutes")
    parser.add_argument("--out", type=Path, default=None,
                        help="results folder (default runs/reproduce-<scale>, which git ignores)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these experiments")
    parser.add_argument("--task-index", type=int, help="run only experiment number K (SLURM_ARRAY_TASK_ID)")
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
    out = (args.out or ROOT / "runs" / f"reproduce-{args.scale}").resolve()
    if args.count:
        print(len(EXPERIMENTS))
        return
    if args.list:
        for index, experiment in enumerate(EXPERIMENTS):
            command = experiment.commands[args.scale]
            how = (" ".join(command) if command else "copied from benchmarks/results" if experiment.results_file
                   else "not run at this scale")
            print(f"{index:2d} {experiment.name}: {how}")
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
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    if not args.report_only:
        rows = [run_experiment(experiment, args.scale, out, args.timeout_seconds) for experiment in selected]
        write_experiments_table(rows, out, args.scale)
    if not args.no_report:
        report_command = [sys.executable, "-m", "lamarckian_hpc", "report", str(out), "--out", str(out / "report")]
        report = subprocess.run(report_command, cwd=ROOT)
        if report.returncode != 0:
            sys.exit(report.returncode)
    print(f"reproduce ({args.scale}): {time.monotonic() - started:.0f} s in all; results in {out}")


if __name__ == "__main__":
    main()
