"""The image-Pong learner's update time on the CPU and, when torch sees one, on a GPU.

One update is what the learner of `configs/ppo_pong_image.yaml` does with a batch: the batch of
8,192 uint8 4x84x84 observations moved to the device, the critic's pass for GAE, then one epoch of
32 minibatches of 256 through the CNN (`PPOLearner.update`, nothing left out), for each
of the CNN stacks `model.cnn_layers` offers (Table III's and DQN's). The
experience is synthetic (random frames, fragments of 256 steps from 32 environments), because the
update's cost does not depend on what the frames show. `runtime.device=auto` picks the GPU for
the learner when there is one; the actors stay on the CPU either way.

    python benchmarks/scale/learner_device.py [--updates 5] [--cpu-threads N] [--cnn-layers table3 nature] [--output FILE]

Prints a Markdown table and writes benchmarks/results/learner_device.json. Needs the atari extra
(the observation space is the environment's own).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
from pathlib import Path

import torch

from benchmarks import common
from benchmarks.scale.learner_ceiling import synthetic_experience, update_seconds
from lamarckian_hpc.config import load_config
from lamarckian_hpc.runtime.algorithms import make_learner
from lamarckian_hpc.runtime.run_shape import spaces_of

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "ppo_pong_image.yaml"
RESULTS = ROOT / "benchmarks" / "results" / "learner_device.json"


def time_updates(device: str, updates: int, threads: int, cnn_layers: str) -> dict:
    """Seconds per update on `device` with `cnn_layers`, after one warm-up update (the median of `updates`)."""
    torch.set_num_threads(threads)
    config = load_config(CONFIG, [f"runtime.device={device}", f"runtime.torch_threads={threads}",
                                  f"model.cnn_layers={cnn_layers}"])
    observation_space, action_space = spaces_of(config)
    learner = make_learner(config, observation_space, action_space)
    experience = synthetic_experience(observation_space, int(action_space.n), config.algorithm.batch_size, 0)
    seconds = update_seconds(learner, experience, updates)
    median = statistics.median(seconds[1:])
    name = torch.cuda.get_device_name(learner.device) if learner.device.type == "cuda" else platform.processor()
    return {"device": device, "device_name": name or platform.machine(), "cnn_layers": cnn_layers, "threads": threads,
            "batch": len(experience), "minibatches": config.algorithm.num_minibatches,
            "warmup_seconds": seconds[0], "update_seconds": median, "samples_per_second": len(experience) / median}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=5, help="timed updates per device (after one warm-up)")
    parser.add_argument("--cpu-threads", type=int, default=os.cpu_count() or 1, help="torch threads on the CPU")
    parser.add_argument("--cnn-layers", nargs="+", default=["table3", "nature"], choices=("table3", "nature"),
                        help="the CNN stacks to time (model.cnn_layers)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    common.add_common_args(parser)
    args = parser.parse_args()
    rows = []
    for layers in args.cnn_layers:
        rows.append(time_updates("cpu", args.updates, args.cpu_threads, layers))
        if torch.cuda.is_available():
            rows.append(time_updates("cuda", args.updates, 1, layers))
    print("| CNN | device | threads | batch | update (s) | samples/s | speed-up |\n|---|---|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['cnn_layers']} | {row['device']} ({row['device_name']}) | {row['threads']} | {row['batch']:,} | "
              f"{row['update_seconds']:.3f} | {row['samples_per_second']:,.0f} | "
              f"{rows[0]['update_seconds'] / row['update_seconds']:.1f}x |")
    if len(rows) == 1:
        print("\nno GPU here: torch.cuda.is_available() is False, so only the CPU was measured")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    common.write_results(args.output, {"torch": torch.__version__,
                                       "gpu": torch.cuda.is_available(), "rows": rows}, args.label)
    print(f"written: {args.output}")


if __name__ == "__main__":
    main()
