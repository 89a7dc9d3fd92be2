"""How many env steps one learner trains per second: the ceiling of a whole run once policy lag
is bounded, whatever the number of actors.

The learner is fed synthetic batches at full speed, no actors and no transport: each timed call
is `learner.update` on one batch of the workload's own shape and settings (its config's batch
size, epochs and minibatches; the critic's pass for GAE or V-trace included), so the figure is
exactly the learner's share of a run. The update's cost does not depend on what the observations
show, only on their shape, so random observations stand in for recorded ones.

Workloads (the network and the spaces of a config; the algorithm PPO or IMPALA with that config's
batch, epochs and minibatches):

- `cartpole`: `configs/ppo_cartpole.yaml`, an MLP on 4 floats;
- `football`: `configs/ppo_football_empty_goal_close.yaml`, an MLP on Football's 115 floats;
- `pong-table3`, `pong-nature`: `configs/ppo_pong_image.yaml`, the CNN stacks on 4x84x84 uint8 frames.

    python benchmarks/scale/learner_ceiling.py [--workloads ...] [--algorithms ppo impala] [--threads 1 2]
                                         [--updates 5] [--cnn-batch-size 2048] [--cnn-precision bfloat16]
                                         [--label after] [--output FILE]

Prints a Markdown table (env steps trained per second, and per core) and adds its rows, under
`--label`, to benchmarks/results/learner_ceiling.json (replacing the rows it measured again), so
that a table before a change and one after sit side by side. Spaces are built from their shapes, so neither ALE nor Football is needed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from benchmarks import common
from lamarckian_hpc.config import RunConfig, build_config
from lamarckian_hpc.config.loading import read_config_file
from lamarckian_hpc.mdp.experience import ExperienceBatch
from lamarckian_hpc.models.cnn import PRECISIONS
from lamarckian_hpc.runtime.algorithms import make_learner

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "learner_ceiling.json"
FRAGMENT_STEPS = 256


@dataclass(frozen=True)
class Workload:
    config: str
    observation_space: gym.Space
    actions: int
    overrides: tuple[tuple[str, str], ...] = ()


IMAGE = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
WORKLOADS = {
    "cartpole": Workload("ppo_cartpole.yaml", gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), 2),
    "football": Workload("ppo_football_empty_goal_close.yaml", gym.spaces.Box(-np.inf, np.inf, (115,), np.float32), 19),
    "pong-table3": Workload("ppo_pong_image.yaml", IMAGE, 6, (("cnn_layers", "table3"),)),
    "pong-nature": Workload("ppo_pong_image.yaml", IMAGE, 6, (("cnn_layers", "nature"),)),
}
#: the settings PPO and IMPALA share; the rest of the algorithm section keeps IMPALA's defaults
SHARED_SETTINGS = ("batch_size", "num_epochs", "num_minibatches", "learning_rate", "gamma", "value_weight",
                   "entropy_weight", "max_grad_norm", "reward_scale", "policy_weight")


def workload_config(workload: Workload, algorithm: str, threads: int, device: str,
                    batch_size: int | None = None, cnn_precision: str | None = None) -> RunConfig:
    """The workload's config, its algorithm switched to `algorithm` with the same batch and passes
    (`batch_size`, when given, keeps the minibatch size: a smaller batch is fewer minibatches;
    `cnn_precision`, when given, is the CNN's `model.cnn_precision`)."""
    tree = read_config_file(ROOT / "configs" / workload.config)
    section = tree["algorithm"]
    if algorithm != section.get("name", "ppo"):
        section = {key: value for key, value in section.items() if key in SHARED_SETTINGS} | {"name": algorithm}
    if batch_size is not None:
        minibatch = section["batch_size"] // section.get("num_minibatches", 4)
        section = {**section, "batch_size": batch_size, "num_minibatches": max(1, batch_size // minibatch)}
    tree["algorithm"] = section
    tree["model"] = {**tree.get("model", {}), **dict(workload.overrides)}
    if cnn_precision is not None and tree["model"].get("kind") == "cnn":
        tree["model"]["cnn_precision"] = cnn_precision
    tree["runtime"] = {"mode": "serial", "torch_threads": threads, "device": device}
    return build_config(tree, workload.config)


def synthetic_experience(observation_space: gym.Space, action_count: int, steps: int, seed: int) -> ExperienceBatch:
    """`steps` random steps in fragments of FRAGMENT_STEPS (fewer when the batch is smaller), each
    ending in a bootstrap observation, with rare rewards of +-1 as Pong and Football give."""
    rng = np.random.default_rng(seed)
    fragment = min(FRAGMENT_STEPS, steps)
    fragments = steps // fragment
    shape = observation_space.shape

    def observations(count: int) -> np.ndarray:
        if observation_space.dtype == np.uint8:
            return rng.integers(0, 256, (count, *shape), dtype=np.uint8)
        return rng.standard_normal((count, *shape)).astype(np.float32)

    return ExperienceBatch(
        observations=observations(fragments * fragment),
        actions=rng.integers(0, action_count, fragments * fragment),
        log_probs=np.full(fragments * fragment, -np.log(action_count), dtype=np.float32),
        rewards=rng.choice(np.array([-1.0, 0.0, 1.0], dtype=np.float32), fragments * fragment, p=[0.01, 0.98, 0.01]),
        policy_versions=np.zeros(fragments * fragment, dtype=np.int64),
        lengths=np.full(fragments, fragment, dtype=np.int64),
        terminated=np.zeros(fragments, dtype=bool),
        bootstrap_observations=observations(fragments),
    )


def update_seconds(learner, experience: ExperienceBatch, updates: int) -> list[float]:
    """Seconds of one warm-up update, then of `updates` timed ones (a GPU's work waited for)."""
    seconds = []
    for index in range(updates + 1):
        started = time.perf_counter()
        learner.update(experience, env_frames=index * len(experience))
        if learner.device.type == "cuda":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - started)
    return seconds


def time_learner(config: RunConfig, workload: Workload, updates: int) -> dict:
    """The median seconds of `updates` updates after one warm-up, and the steps they train per second."""
    torch.set_num_threads(config.runtime.torch_threads)
    action_space = gym.spaces.Discrete(workload.actions)
    learner = make_learner(config, workload.observation_space, action_space)
    experience = synthetic_experience(workload.observation_space, workload.actions, config.algorithm.batch_size, 0)
    seconds = update_seconds(learner, experience, updates)
    median = statistics.median(seconds[1:])
    algorithm = config.algorithm
    return {"algorithm": algorithm.name, "device": learner.device.type, "threads": config.runtime.torch_threads,
            "batch": len(experience), "epochs": algorithm.num_epochs, "minibatches": algorithm.num_minibatches,
            "warmup_seconds": seconds[0], "update_seconds": median, "spread_seconds": max(seconds[1:]) - min(seconds[1:]),
            "steps_per_second": len(experience) / median}


def _row_key(row: dict) -> tuple:
    return row["label"], row["workload"], row["algorithm"], row["device"], row["threads"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    parser.add_argument("--algorithms", nargs="+", default=["ppo", "impala"], choices=("ppo", "impala"))
    parser.add_argument("--threads", nargs="+", type=int, default=[1, os.cpu_count() or 1],
                        help="torch threads of the learner; per-core figures divide by this")
    parser.add_argument("--device", default="cpu", help="runtime.device of the learner (cpu, cuda, auto)")
    parser.add_argument("--updates", type=int, default=5, help="timed updates per row (after one warm-up)")
    parser.add_argument("--cnn-batch-size", type=int,
                        help="the image workloads' batch (default: the config's 8,192); the same minibatches, fewer "
                             "of them, so the figure per step is the same in less time")
    parser.add_argument("--cnn-precision", choices=sorted(PRECISIONS),
                        help="the image workloads' model.cnn_precision (default: the config's, float32)")
    parser.add_argument("--label", default="now", help="the name these rows are kept under in the JSON file")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    rows = []
    print("| workload | algorithm | device | threads | batch x epochs | update (s) | steps/s | steps/s per core |\n"
          "|---|---|---|---:|---:|---:|---:|---:|", flush=True)
    for name in args.workloads:
        workload = WORKLOADS[name]
        for algorithm in args.algorithms:
            for threads in sorted(set(args.threads)):
                batch = args.cnn_batch_size if workload.observation_space.dtype == np.uint8 else None
                config = workload_config(workload, algorithm, threads, args.device, batch, args.cnn_precision)
                precision = config.model.cnn_precision if config.model.kind == "cnn" else None
                row = {"workload": name, "cnn_precision": precision, **time_learner(config, workload, args.updates)}
                rows.append(row)
                print(f"| {name} | {row['algorithm']} | {row['device']} | {threads} | "
                      f"{row['batch']:,} x {row['epochs']} | {row['update_seconds']:.3f} | "
                      f"{row['steps_per_second']:,.0f} | {row['steps_per_second'] / threads:,.0f} |", flush=True)
    kept = (common.read_results(args.output) or {}).get("rows", [])  # --label names rows here, not an entry
    rows = [{"label": args.label, **row} for row in rows]
    measured = {_row_key(row) for row in rows}  # a row measured again replaces its older figure
    rows = [row for row in kept if _row_key(row) not in measured] + rows
    rows.sort(key=lambda row: (list(WORKLOADS).index(row["workload"]), row["algorithm"] != "ppo", row["threads"]))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    common.write_results(args.output, {"torch": torch.__version__, "rows": rows})
    print(f"written: {args.output} ({args.label})")


if __name__ == "__main__":
    main()
