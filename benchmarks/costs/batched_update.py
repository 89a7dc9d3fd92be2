"""PPO update time of a population, member by member (`ppo_update`) against batched (`BatchedPPO`).

The PBT workload of `configs/pbt_ppo_cartpole.yaml`: its model (policy (64, 64) tanh, a critic of
its own), its PPO batch, minibatches and epochs (256 in 2 minibatches of 128, 10 epochs), Adam with
eps 1e-5 as the learners build it; members differ in learning rate, value weight and entropy weight
as PBT makes them differ. Batches are random but valid CartPole batches (observations of CartPole's
shape, actions and their log-probabilities sampled from the member's policy, random advantages and
returns).

For 1, 4 and 16 members, with torch pinned to 1 and to 2 threads: milliseconds of one update of
the whole population, member by member and batched. "batched" includes `write_back` (each
member's parameters and Adam moments copied into its own module and optimizer, which a caller
whose members sample with their own modules pays once per update); "batched, stack only" leaves
it out. Each figure is the median over `--repeats` timed updates, after one untimed warm-up;
member-by-member and batched alternate, so they share the machine's load.

    python benchmarks/costs/batched_update.py [--repeats 3] [--members 1 4 16] [--threads 1 2]

Prints a Markdown table and writes benchmarks/results/batched_update.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks import common
from lamarckian_hpc.config import PBTConfig, PPOConfig, load_config
from lamarckian_hpc.models import ActorCritic
from lamarckian_hpc.rl import RolloutBatch, ppo_update
from lamarckian_hpc.rl.adam import Adam
from lamarckian_hpc.rl.batched_ppo import BatchedPPO

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "batched_update.json"


def population(count: int) -> tuple[list[ActorCritic], list[Adam], list[PPOConfig], list[RolloutBatch]]:
    """`count` members of the PBT config with their own weights, hyperparameters and batches."""
    import gymnasium as gym

    config = load_config(ROOT / "configs" / "pbt_ppo_cartpole.yaml", [], PBTConfig)
    env = gym.make(config.env.id)
    rng = np.random.default_rng(0)
    models, optimizers, configs, batches = [], [], [], []
    for slot in range(count):
        torch.manual_seed(slot)
        model = ActorCritic(env.observation_space, env.action_space, config.model)
        ppo = config.ppo.model_copy(update={"learning_rate": float(10 ** rng.uniform(-4, -2.5)),
                                            "value_weight": float(rng.uniform(0.1, 1.0)),
                                            "entropy_weight": float(10 ** rng.uniform(-4, -2))})
        size = ppo.batch_size
        observations = torch.from_numpy(rng.normal(0.0, [1.0, 0.5, 0.1, 0.5], (size, 4)).astype(np.float32))
        with torch.no_grad():
            actions, log_probs = model.act(observations)
        advantages = torch.from_numpy(rng.normal(size=size).astype(np.float32))
        returns = torch.from_numpy(rng.uniform(0.0, 50.0, size).astype(np.float32))
        models.append(model)
        optimizers.append(Adam(model.parameters(), lr=ppo.learning_rate, eps=1e-5))
        configs.append(ppo)
        batches.append(RolloutBatch(observations, actions, log_probs, advantages, returns))
    return models, optimizers, configs, batches


def measure(count: int, threads: int, repeats: int) -> dict:
    torch.set_num_threads(threads)
    models, optimizers, configs, batches = population(count)
    rngs = [np.random.default_rng(slot) for slot in range(count)]
    batched = BatchedPPO(*population(count)[:3])
    batched_rngs = [np.random.default_rng(slot) for slot in range(count)]
    one_by_one, stack_only, with_write_back = [], [], []
    for repeat in range(repeats + 1):
        start = time.perf_counter()
        for model, optimizer, config, batch, rng in zip(models, optimizers, configs, batches, rngs):
            ppo_update(model, optimizer, batch, config, rng)
        middle = time.perf_counter()
        batched.update(batches, batched_rngs)
        updated = time.perf_counter()
        batched.write_back()
        end = time.perf_counter()
        if repeat:  # the first is the warm-up
            one_by_one.append(1e3 * (middle - start))
            stack_only.append(1e3 * (updated - middle))
            with_write_back.append(1e3 * (end - middle))
    row = {"members": count, "threads": threads, "one_by_one_ms": statistics.median(one_by_one),
           "batched_ms": statistics.median(with_write_back), "batched_stack_only_ms": statistics.median(stack_only),
           "one_by_one_ms_all": one_by_one, "batched_ms_all": with_write_back,
           "batched_stack_only_ms_all": stack_only, "load_average_after": os.getloadavg()}
    row["speed_up"] = row["one_by_one_ms"] / row["batched_ms"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--members", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--output", type=Path, default=RESULTS)
    common.add_common_args(parser)
    args = parser.parse_args()
    load_before = os.getloadavg()
    rows = []
    for threads in args.threads:
        for count in args.members:
            rows.append(measure(count, threads, args.repeats))
            summary = {k: v for k, v in rows[-1].items() if not k.endswith("_all")}
            print(json.dumps(summary), file=sys.stderr, flush=True)
    ppo = load_config(ROOT / "configs" / "pbt_ppo_cartpole.yaml", [], PBTConfig).ppo
    print(f"\nPBT CartPole workload (batch {ppo.batch_size}, minibatch {ppo.minibatch_size}, {ppo.num_epochs} epochs, "
          f"(64, 64) tanh); median of {args.repeats}; "
          f"{os.cpu_count()} cores; load average {load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after\n")
    print("| members | threads | one-by-one ms | batched ms | speed-up | batched, stack only ms |")
    print("|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['members']} | {row['threads']} | {row['one_by_one_ms']:.0f} | {row['batched_ms']:.0f} | "
              f"{row['speed_up']:.2f}x | {row['batched_stack_only_ms']:.0f} |")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    common.write_results(args.output, {"load_average": load_before,
                                       "torch": torch.__version__, "repeats": args.repeats, "rows": rows}, args.label)
    print(f"\nwritten: {args.output}")


if __name__ == "__main__":
    main()
