"""Policy lag and sampling speed as the actors grow on one host, with this checkout's code and,
in the same run, another checkout's (`--baseline DIR`, e.g. a worktree of an earlier commit).

Each point is a real `lamarckian-hpc train` run in a child process (learner, actors on the run's
own local Ray, ZeroMQ between them) on the settings `vs_rllib.py` uses for CartPole (model
(256, 128) with a shared trunk, batches of 4096, minibatches of 512, one epoch), asynchronous
sampling, `--seconds` of training. Figures come from the run file alone: staleness (the learner's
own metric, policy versions between the weights that sampled a step and the update that trains
it) as the mean of the per-update means and the largest value, leaving out the first `--skip`
updates (start-up); env steps per second sampled over the same span (env frames between the
first kept update and the last, over the wall time between them); steps trained per second; and
the steps dropped as older than `runtime.max_policy_lag`. Sides alternate within each repeat, so
a busy machine slows both alike; `--variant OVERRIDES` adds a side of this checkout with those
overrides, alternating with the others.

    python benchmarks/scale/policy_lag.py --actors 2 32 [--seconds 60] [--baseline /tmp/old] [--repeats 1]

With `--hosts N` each point is instead a `lamarckian-hpc launch` of the plain
`configs/ppo_cartpole.yaml` on N nodes of a running Slurm cluster (the test cluster:
`slurm/testcluster/start.sh N`, then `source /var/tmp/lamarckian-testcluster/env`), `--cpus-per-node`
cores each and one actor per core but the learner's: the settings of the 8-host figure in the
scaling issue, where the batch is 512 frames. The layout is the run's default unless an override
names one (`--baseline-overrides runtime.broadcast=tree` for a checkout whose default was flat).

Prints a Markdown table and writes benchmarks/results/policy_lag.json (or `--output`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from benchmarks import common

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RESULTS = HERE.parent / "results" / "policy_lag.json"
CONFIG = ROOT / "configs" / "ppo_cartpole.yaml"
SETTINGS = ["env.num_envs=8", "model.policy_hidden_sizes=[256,128]", "model.critic_hidden_sizes=[]",
            "model.share_trunk=true", "algorithm.batch_size=4096", "algorithm.num_minibatches=8",
            "algorithm.num_epochs=1", "algorithm.learning_rate=0.00025", "stop.target_return=null",
            "stop.total_env_steps=100000000", "runtime.sampling=async"]


def _metric(file: h5py.File, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    group = file["metrics"][name]
    return group["value"][()], group["env_frames"][()], group["wall_time"][()]


def read_run(path: Path, skip: int) -> dict[str, float]:
    """The figures of one run file (read as a growing file would be, SWMR)."""
    with h5py.File(path, "r", swmr=True, locking=False) as file:
        means, frames, wall = _metric(file, "staleness_mean")
        largest, _, _ = _metric(file, "staleness_max")
        trained, _, _ = _metric(file, "trained_frames_per_second")
        dropped = _metric(file, "dropped_stale_steps")[0] if "dropped_stale_steps" in file["metrics"] else np.zeros(1)
    kept = slice(skip, None)
    if len(means) <= skip + 1:
        raise RuntimeError(f"{path}: only {len(means)} updates, fewer than --skip {skip} + 2")
    span = wall[-1] - wall[skip]
    return {"updates": float(len(means)), "staleness_mean": float(np.mean(means[kept])),
            "staleness_max": float(np.max(largest[kept])),
            "env_steps_per_second": float((frames[-1] - frames[skip]) / span),
            "trained_steps_per_second": float(np.median(trained[kept])),
            "dropped_stale_steps": float(dropped[-1]) if len(dropped) else 0.0}


#: Tries of one run: on a loaded machine the test cluster's Ray nodes now and then miss their
#: registration window (`cluster.ray_cluster`), and the run ends before training; it is run again.
TRIES = 2


def run_side(code: Path, name: str, folder: Path, command: list[str], overrides: list[str], timeout: float) -> Path:
    """One run of `lamarckian-hpc COMMAND` with the package in `code` first on the path (Slurm
    passes PYTHONPATH on to every task of a launch); its run file."""
    env = {**os.environ, "PYTHONPATH": str(code), "OMP_NUM_THREADS": "1"}
    started = time.monotonic()
    for attempt in range(TRIES):
        tried = [part.replace(f"{name}-job", f"{name}-{attempt}-job") for part in command]  # a job folder each
        completed = subprocess.run([sys.executable, "-m", "lamarckian_hpc.cli", *tried,
                                    f"storage.directory={folder}", f"storage.run_name={name}-{attempt}", *overrides],
                                   env=env, cwd=code, capture_output=True, text=True, timeout=timeout)
        if completed.returncode == 0:
            break
        print(f"  {name} failed ({completed.returncode}): {completed.stderr.strip().splitlines()[-1:]}", flush=True)
    else:
        raise RuntimeError(f"{name} failed ({completed.returncode}):\n{completed.stdout[-2000:]}{completed.stderr[-3000:]}")
    print(f"  {name}: {time.monotonic() - started:.0f} s", flush=True)
    return folder / f"{name}-{attempt}.h5"


def train_on_this_host(code: Path, actors: int, seconds: float, folder: Path, name: str, extra: list[str]) -> Path:
    """A `train` of the vs_rllib settings with `actors` actors on this machine."""
    return run_side(code, name, folder, ["train", str(CONFIG)],
                    [*SETTINGS, f"runtime.num_actors={actors}", f"stop.max_wall_seconds={seconds}", *extra],
                    seconds + 300)


def launch_on_hosts(code: Path, hosts: int, cpus_per_node: int, seconds: float, folder: Path, name: str,
                    extra: list[str]) -> Path:
    """A `launch` of the plain CartPole config over `hosts` Slurm nodes."""
    return run_side(code, name, folder, ["launch", str(CONFIG), "--nodes", str(hosts), "--cpus-per-node",
                                         str(cpus_per_node), "--folder", str(folder / f"{name}-job")],
                    [f"stop.max_wall_seconds={seconds}", "stop.target_return=null", "stop.total_env_steps=100000000",
                     *extra], seconds + 600)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--actors", type=int, nargs="+", default=[2, 32])
    parser.add_argument("--seconds", type=float, default=60.0, help="training seconds per run")
    parser.add_argument("--skip", type=int, default=3, help="updates left out at the start")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--baseline", type=Path, help="another checkout to measure in the same run")
    parser.add_argument("--baseline-overrides", nargs="*", default=[], help="overrides for the baseline only")
    parser.add_argument("--overrides", nargs="*", default=[], help="overrides for this checkout only")
    parser.add_argument("--variant", action="append", default=[], metavar="OVERRIDES",
                        help="one more side of this checkout, with these space-separated overrides "
                             "(e.g. 'runtime.batches_in_flight=1.5'); may be given more than once")
    parser.add_argument("--hosts", type=int, help="launch on this many Slurm nodes instead (see above)")
    parser.add_argument("--cpus-per-node", type=int, default=2, help="with --hosts: cores per node")
    parser.add_argument("--output", type=Path, default=RESULTS)
    common.add_common_args(parser)
    args = parser.parse_args(argv)
    if args.hosts is not None:
        args.actors = [args.hosts * args.cpus_per_node - 1]  # a core per actor, the learner's aside
    sides = {"this": (ROOT, args.overrides)}
    for variant in args.variant:
        sides[f"this, {variant}"] = (ROOT, [*args.overrides, *variant.split()])
    if args.baseline is not None:
        sides["baseline"] = (args.baseline.resolve(), args.baseline_overrides)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="policy-lag-") as folder:
        for actors in args.actors:
            runs: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
            for repeat in range(args.repeats):
                for number, (side, (code, extra)) in enumerate(sides.items()):
                    name = f"side{number}-{actors}-{repeat}"  # a file name, whatever the side's overrides
                    if args.hosts is None:
                        path = train_on_this_host(code, actors, args.seconds, Path(folder), name, extra)
                    else:
                        path = launch_on_hosts(code, args.hosts, args.cpus_per_node, args.seconds, Path(folder),
                                               name, extra)
                    runs[side].append(read_run(path, args.skip))
                    print(f"  {name} ({side}): {json.dumps(runs[side][-1])}", flush=True)
            for side, figures in runs.items():
                row = {"side": side, "hosts": args.hosts or 1, "actors": actors, "repeats": len(figures)}
                for key in figures[0]:
                    row[key] = statistics.median(run[key] for run in figures)
                rows.append(row)
    print("\n| side | hosts | actors | staleness mean | staleness max | env steps/s sampled | steps/s trained | dropped |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['side']} | {row['hosts']} | {row['actors']} | {row['staleness_mean']:.2f} | {row['staleness_max']:.0f} | "
              f"{row['env_steps_per_second']:,.0f} | {row['trained_steps_per_second']:,.0f} | "
              f"{row['dropped_stale_steps']:,.0f} |")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    common.write_results(args.output, {
        "settings": SETTINGS if args.hosts is None else ["configs/ppo_cartpole.yaml as it is"],
        "hosts": args.hosts or 1, "cpus_per_node": args.cpus_per_node if args.hosts else None, "seconds": args.seconds, "skip": args.skip, "baseline": str(args.baseline or ""),
        "machine": {"platform": platform.platform()}, "rows": rows}, args.label)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
