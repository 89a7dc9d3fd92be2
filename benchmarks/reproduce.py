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
rows say "not run: needs RLlib" (install it as the docstring of benchmarks/vs_rllib.py says). The
image-Pong and Football comparisons also need their environment's extra in that interpreter
(ale-py and opencv, gfootball); without it their rows say which module is missing.
scale_model reads the sampling_hosts, broadcast and staleness results this run wrote into OUT, so
in a Slurm job array it runs in the dependent job (`--final`), after the array. sampling_hosts
(and through it scale_model) needs root: it emulates hosts in network namespaces.

OUT/experiments.md has a row per experiment: the paper's figure or table, the paper's reported
value, the headline figure measured here (read from the experiment's JSON or run file), where this
scale differs from the paper's, how the command ended, its wall time and the command. The report
is `lamarckian-hpc report OUT --out OUT/report`.
"""

from __future__ import annotations

import argparse
import functools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from reproduce_experiments import EXPERIMENTS, SCALES, Experiment  # this script's folder is first on sys.path
from reproduce_headlines import headline

ROOT = Path(__file__).resolve().parents[1]
SCALE_ALIASES = {"paper": "large"}  # the name of `large` before it was renamed
PAPER_SETUP = ("the paper: small-scale runs on 10-160 CPU cores, large-scale on 2000-6000, nodes of 40 Intel Xeon "
               "Gold 6148 cores, one A100 learner GPU, each figure averaged over 5 runs")
RLLIB_INSTALL = ("install RLlib there as the docstring of benchmarks/vs_rllib.py says (e.g. `pip install --no-deps "
                 "dm_tree absl-py lz4 ormsgpack pyarrow tensorboardX \"pandas<3\" pytz tzdata` beside ray 2.60), "
                 "or pass --peer-python")


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


@functools.lru_cache(maxsize=None)
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
