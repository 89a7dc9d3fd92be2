"""Where should a PBT population of PPO learners live on one machine? Throughput of each layout.

Population 4 of `configs/pbt_ppo_cartpole.yaml` (CartPole-v1, PPO batch 256, 20 epochs), trained
for `--intervals` intervals of 4,096 env frames per member with exploit and explore on, in each
layout, one after another in this run:

- `serial`: one process (this one) stepping all four members in turn;
- `ray-1`, `ray-2`, `ray-4`: 1, 2 or 4 Ray worker processes, each stepping its share of the members.

Figures: env frames per second of the whole population over the training (Ray start-up and
building the members left out) and the wall time of the run including them.

    python benchmarks/pbt_layout.py [--intervals 3] [--layouts serial ray-1 ray-2 ray-4]

Prints a Markdown table and writes benchmarks/results/pbt_layout.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

os.environ.update({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "RAY_AUTH_MODE": "disabled"})

from lamarckian_hpc.config import PBTConfig, load_config  # noqa: E402
from lamarckian_hpc.evorl import run_pbt  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "pbt_layout.json"
LAYOUTS = ("serial", "ray-1", "ray-2", "ray-4")


def measure(layout: str, intervals: int) -> dict:
    frames = 4096 * intervals
    overrides = ["stop.target_return=null", f"stop.total_env_frames={frames}", "algorithm.interval_env_frames=4096"]
    if layout == "serial":
        overrides.append("runtime.mode=serial")
    else:
        overrides += ["runtime.mode=ray", f"runtime.num_workers={layout.split('-')[1]}"]
    config = load_config(ROOT / "configs" / "pbt_ppo_cartpole.yaml", overrides, PBTConfig)
    started = time.monotonic()
    result = run_pbt(config)
    return {"layout": layout, "env_frames": result.env_frames, "training_seconds": result.wall_time_seconds,
            "frames_per_second": result.env_frames / result.wall_time_seconds,
            "run_seconds": time.monotonic() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--intervals", type=int, default=3)
    parser.add_argument("--layouts", nargs="+", choices=LAYOUTS, default=list(LAYOUTS))
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    rows = [measure(layout, args.intervals) for layout in args.layouts]
    print(f"\npopulation 4, {args.intervals} intervals of 4,096 env frames per member; {os.cpu_count()} cores\n")
    print("| layout | env frames/s (population) | training (s) | run incl. start-up (s) |")
    print("|---|---:|---:|---:|")
    for row in rows:
        print(f"| {row['layout']} | {row['frames_per_second']:,.0f} | {row['training_seconds']:.1f} | "
              f"{row['run_seconds']:.1f} |")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({"host": platform.node(), "cpus": os.cpu_count(),
                                       "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
                                       "intervals": args.intervals, "rows": rows}, indent=2))
    print(f"\nwritten: {args.output}")


if __name__ == "__main__":
    main()
