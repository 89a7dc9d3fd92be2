"""Steps per second of ALE Pong's ids on one core: random actions, and an actor's sampling.

Three ways of stepping: `lamarckian/PongImage-v0` and `lamarckian/PongRAM-v0` with random actions
and no policy (what the ALE and the preprocessing cost), and the image id as one PPO actor of
`configs/ppo_pong_image.yaml` samples it: `--num-envs` environments, one batched CNN inference
per tick with torch on one thread, no learning. The last is the figure an actor per core gives a
run; the first two bound it. Needs the atari extra.

    python benchmarks/costs/atari_steps.py [--steps 3000] [--repeats 3] [--num-envs 8] [--output FILE]

Prints a Markdown table; `--output` writes the raw numbers as JSON.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np

from benchmarks import common
from benchmarks.costs.pong_steps import single  # benchmarks/costs/pong_steps.py: the same stepping loop
from lamarckian_hpc.envs.atari import IMAGE_ID, RAM_ID, atari_problem

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "ppo_pong_image.yaml"


def random_actions(env_id: str, steps: int) -> float:
    """Env steps/s of one environment under uniformly random actions (reset time included)."""
    env = gym.make(env_id)
    try:
        return single(env, np.random.default_rng(0).integers(0, env.action_space.n, steps).tolist())
    finally:
        env.close()


def actor_sampling(steps: int, num_envs: int) -> float:
    """Env steps/s of the sampling side of one actor of the image config (CNN policy, no learning)."""
    import torch

    from lamarckian_hpc.config import load_config
    from lamarckian_hpc.runtime.actor.sides import make_sampling_side

    torch.set_num_threads(1)
    side = make_sampling_side(load_config(CONFIG, [f"env.num_envs={num_envs}"]), seed=0)
    try:
        side.sample(num_envs)  # the first tick resets every environment
        side.experience.take()
        start = time.perf_counter()
        side.sample(steps)
        rate = len(side.experience.take()) / (time.perf_counter() - start)
    finally:
        side.close()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--output", type=Path, default=None, help="write the raw numbers here as JSON")
    common.add_common_args(parser)
    args = parser.parse_args()
    problem = atari_problem()
    if problem is not None:
        raise SystemExit(problem)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    cases: dict[str, Callable[[], float]] = {
        f"{IMAGE_ID}, random actions": lambda: random_actions(IMAGE_ID, args.steps),
        f"{RAM_ID}, random actions": lambda: random_actions(RAM_ID, args.steps),
        f"{IMAGE_ID}, one actor: {args.num_envs} envs, CNN inference":
            lambda: actor_sampling(args.steps, args.num_envs),
    }
    rows = {name: statistics.median(case() for _ in range(args.repeats)) for name, case in cases.items()}
    print(f"| stepping (one core) | env steps/s (median of {args.repeats} x {args.steps:,}) |\n|---|---:|")
    for name, rate in rows.items():
        print(f"| {name} | {rate:,.0f} |")
    if args.output is not None:
        common.write_results(args.output, {"steps": args.steps, "repeats": args.repeats, "num_envs": args.num_envs,
                                           "steps_per_second": rows}, args.label)


if __name__ == "__main__":
    main()
