"""PPO learning image Pong on this machine, as a user runs it: `lamarckian-hpc train
configs/ppo_pong_image_cpu.yaml` (DQN's CNN, a learner on one CPU thread, an actor per core), and
the curve read back from its run file.

Per run: the mean return of the last `stop.return_window` episodes against env frames and wall
time (from the run file's `episode_return_mean`, `env_frames_per_second` and `entropy`), the
untrained policy's score (the first full window), the best window, and when the score first
stood `--points` above the untrained policy's (5 by default), in env frames and in
seconds of training. The run stops at `--max-seconds` of training, or at the config's target.

    python benchmarks/learning/pong_image_learning.py [--seed 0] [--max-seconds 2160] [--points 5] [overrides ...]
    python benchmarks/learning/pong_image_learning.py --run runs/pong.h5    # read a run made before
    python benchmarks/learning/pong_image_learning.py runtime.learners=4 runtime.learner_placement=pack \
        runtime.num_actors=4 --keep runs/ranks4     # 4 learner ranks on this machine
    python benchmarks/learning/pong_image_learning.py model.cnn_precision=bfloat16 \
        --label bfloat16

Prints a Markdown table and writes benchmarks/results/pong_image_learning.json. Needs the atari
extra.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks import common
from lamarckian_hpc.storage import open_run

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "ppo_pong_image_cpu.yaml"
RESULTS = Path(__file__).resolve().parents[1] / "results" / "pong_image_learning.json"
MARKS = (100_000, 250_000, 500_000, 750_000, 1_000_000, 1_500_000, 2_000_000)


def summarize(path: Path, points: float) -> dict:
    with open_run(path) as reader:
        returns = reader.metric("episode_return_mean")
        episodes = reader.metric("episodes")
        entropy = reader.metric("entropy")
        staleness = reader.metric("staleness_mean")
        config = reader.config
    # From the first update whose window is full: before it, the mean is over fewer episodes.
    window = config["stop"]["return_window"]
    full = episodes.env_frames[episodes.value >= window]
    scored = np.isfinite(returns.value) & (returns.env_frames >= (full[0] if len(full) else np.inf))
    frames, seconds, values = returns.env_frames[scored], returns.wall_time[scored], returns.value[scored]
    if not len(values):
        return {"run": str(path), "error": f"fewer than {window} episodes ended"}
    start = float(values[0])
    above = np.flatnonzero(values >= start + points)
    first = int(above[0]) if len(above) else None
    return {
        "run": str(path), "env": config["env"]["id"], "cnn_layers": config["model"].get("cnn_layers", "table3"),
        "cnn_precision": config["model"].get("cnn_precision", "float32"),
        "seed": config["seed"], "learners": config["runtime"].get("learners", 1),
        "actors": config["runtime"].get("num_actors"), "return_window": config["stop"]["return_window"],
        "untrained_return": round(start, 2), "best_return": round(float(values.max()), 2),
        "final_return": round(float(values[-1]), 2), "points": points,
        "frames_to_points": int(frames[first]) if first is not None else None,
        "seconds_to_points": round(float(seconds[first]), 1) if first is not None else None,
        "env_frames": int(returns.env_frames.max()), "wall_seconds": round(float(returns.wall_time.max()), 1),
        "frames_per_second": round(float(returns.env_frames.max() / max(returns.wall_time.max(), 1e-9)), 1),
        "final_entropy": round(float(entropy.value[-1]), 3) if len(entropy.value) else None,
        "staleness_mean": round(float(np.nanmean(staleness.value)), 2) if np.isfinite(staleness.value).any() else None,
        "return_at_frames": {str(mark): round(float(values[frames <= mark][-1]), 2)
                             for mark in MARKS if (frames <= mark).any() and frames.max() >= mark},
        "curve": [[int(f), round(float(s), 1), round(float(v), 2)] for f, s, v in zip(frames, seconds, values)][::5],
    }


def run(seed: int, max_seconds: float, overrides: list[str], folder: Path) -> Path:
    command = [sys.executable, "-m", "lamarckian_hpc", "train", str(CONFIG), f"seed={seed}",
               f"stop.max_wall_seconds={max_seconds}", f"storage.directory={folder}", f"storage.run_name=pong_s{seed}",
               *overrides]
    print(" ".join(command), file=sys.stderr, flush=True)
    subprocess.run(command, cwd=ROOT, check=True)
    return folder / f"pong_s{seed}.h5"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-seconds", type=float, default=2160.0, help="training budget in seconds")
    parser.add_argument("--points", type=float, default=5.0, help="the rise over the untrained policy to time")
    parser.add_argument("--run", type=Path, nargs="+", help="read these run files (one entry) instead of training")
    parser.add_argument("--keep", type=Path, help="write the run file into this folder (default: a temporary one)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("overrides", nargs="*", help="config overrides (key.path=value)")
    common.add_common_args(parser)
    args = parser.parse_args()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pong-learning-") as folder:
        paths = args.run or [run(args.seed, args.max_seconds, args.overrides, args.keep or Path(folder))]
        summaries = [summarize(path, args.points) for path in paths]
    if args.run is None:
        summaries[0]["command_seconds"] = round(time.monotonic() - started, 1)
    print(f"| CNN | learners | seed | untrained | best | final | +{args.points:g} points at | frames | training (s) | frames/s "
          "| entropy |")
    print("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|")
    for summary in summaries:
        rise = "not reached" if summary.get("frames_to_points") is None else \
            f"{summary['frames_to_points']:,} frames, {summary['seconds_to_points']:.0f} s"
        print(f"| {summary.get('cnn_layers')} | {summary.get('learners')} | {summary.get('seed')} | "
              f"{summary.get('untrained_return')} | {summary.get('best_return')} | {summary.get('final_return')} | "
              f"{rise} | {summary.get('env_frames', 0):,} | {summary.get('wall_seconds')} | "
              f"{summary.get('frames_per_second')} | {summary.get('final_entropy')} |")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    common.write_results(args.output, {"runs": summaries}, args.label)
    print(f"written: {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
