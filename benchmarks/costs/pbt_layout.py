"""Where should a PBT population of PPO learners live on one machine? Start-up and throughput of each layout.

Population 4 of `configs/pbt_ppo_cartpole.yaml` (CartPole-v1, PPO batch 256, 10 epochs), trained
for `--intervals` intervals of 4,096 env frames per member with exploit and explore on, in each
layout, one after another, each in a fresh process of its own (so each pays its own imports):

- `serial`: one process stepping all four members in turn;
- `fork-1`, `fork-2`, `fork-4`: 1, 2 or 4 worker processes forked from the driver (`runtime.mode=fork`);
- `ray-1`, `ray-2`, `ray-4`: 1, 2 or 4 Ray worker processes (`runtime.mode=ray`).

Figures: seconds from process start until the members exist (imports, Ray start or forks,
building the members), env frames per second of the whole population over the training, and
seconds from process start to the end of the last interval.

    python benchmarks/costs/pbt_layout.py [--intervals 2] [--layouts serial fork-2 ray-2]

Prints a Markdown table and writes benchmarks/results/pbt_layout.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

SINGLE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                 "RAY_AUTH_MODE": "disabled", "RAY_worker_niceness": "0"}
os.environ.update(SINGLE_THREAD)

from benchmarks import common  # noqa: E402
from benchmarks.peers.side_by_side import process_seconds  # the time from process start both sides count  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "pbt_layout.json"
LAYOUTS = ("serial", "fork-1", "fork-2", "fork-4", "ray-1", "ray-2", "ray-4")


def measure(layout: str, intervals: int) -> dict:
    """In this (fresh) process: one layout, timed from the start of the process."""
    from lamarckian_hpc.config import PBTConfig, load_config
    from lamarckian_hpc.evorl import run_pbt

    overrides = ["stop.target_return=null", f"stop.total_env_frames={4096 * intervals}",
                 "algorithm.interval_env_frames=4096"]
    if layout == "serial":
        overrides.append("runtime.mode=serial")
    else:
        mode, workers = layout.split("-")
        overrides += [f"runtime.mode={mode}", f"runtime.num_workers={workers}"]
    config = load_config(ROOT / "configs" / "pbt_ppo_cartpole.yaml", overrides, PBTConfig)
    result = run_pbt(config)
    ready = result.started_at - (time.time() - process_seconds())  # process start -> members exist
    return {"layout": layout, "env_frames": result.env_frames, "members_ready_seconds": ready,
            "training_seconds": result.wall_time_seconds,
            "frames_per_second": result.env_frames / result.wall_time_seconds,
            "total_seconds": process_seconds()}


def run_child(layout: str, intervals: int) -> dict:
    command = [sys.executable, str(Path(__file__).resolve()), "--layout", layout, "--intervals", str(intervals)]
    child = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **SINGLE_THREAD}, timeout=1800)
    for line in reversed(child.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    tail = "\n".join((child.stdout + child.stderr).splitlines()[-20:])
    raise RuntimeError(f"layout {layout} failed (exit {child.returncode}):\n{tail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--intervals", type=int, default=2)
    parser.add_argument("--layouts", nargs="+", choices=LAYOUTS, default=list(LAYOUTS))
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--layout", choices=LAYOUTS, help=argparse.SUPPRESS)
    common.add_common_args(parser)
    args = parser.parse_args()
    if args.layout is not None:
        print(json.dumps(measure(args.layout, args.intervals)), flush=True)
        return
    load_before = os.getloadavg()
    rows = []
    for layout in args.layouts:
        rows.append(run_child(layout, args.intervals))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(f"\npopulation 4, {args.intervals} intervals of 4,096 env frames per member; {os.cpu_count()} cores; "
          f"load average {load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after\n")
    print("| layout | members ready (s from process start) | env frames/s (population) | training (s) | total (s) |")
    print("|---|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['layout']} | {row['members_ready_seconds']:.1f} | {row['frames_per_second']:,.0f} | "
              f"{row['training_seconds']:.1f} | {row['total_seconds']:.1f} |")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    common.write_results(args.output, {"load_average": load_before,
                                       "intervals": args.intervals, "rows": rows}, args.label)
    print(f"\nwritten: {args.output}")


if __name__ == "__main__":
    main()
