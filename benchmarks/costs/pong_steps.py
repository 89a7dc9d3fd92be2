"""Steps per second of the built-in vector Pong on one core, with random actions and no policy.

Three ways of stepping it: the env class itself (`PongEnv`), through `gymnasium.make` (with the
wrappers it adds: order enforcing, the passive checker), and the two-player variant (one step
moves both paddles). The target is 50k steps/s single-env; ALE Pong with RAM observations makes
about 1.7k on the same kind of machine (see the environments notes).

    python benchmarks/costs/pong_steps.py [--steps 200000] [--repeats 3]

Prints a Markdown table and writes benchmarks/results/pong_steps.json.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np

from benchmarks import common
from lamarckian_hpc.envs import PongEnv, PongTwoPlayer

RESULTS = Path(__file__).resolve().parents[1] / "results" / "pong_steps.json"


def single(env: gym.Env, actions: list[int]) -> float:
    env.reset(seed=0)
    start = time.perf_counter()
    for action in actions:
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()
    return len(actions) / (time.perf_counter() - start)


def two_player(actions: list[int]) -> float:
    env = PongTwoPlayer()
    env.reset(seed=0)
    start = time.perf_counter()
    for left, right in zip(actions, reversed(actions)):
        env.step({"left": left, "right": right})
        if not env.agents:
            env.reset()
    return len(actions) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    common.add_common_args(parser)
    args = parser.parse_args()
    actions = np.random.default_rng(0).integers(0, 3, args.steps).tolist()
    cases: dict[str, Callable[[], float]] = {
        "PongEnv": lambda: single(PongEnv(), actions),
        "gymnasium.make('lamarckian/Pong-v0')": lambda: single(gym.make("lamarckian/Pong-v0"), actions),
        "PongTwoPlayer (both paddles)": lambda: two_player(actions),
    }
    rows = {name: statistics.median(case() for _ in range(args.repeats)) for name, case in cases.items()}
    print(f"| stepping | steps/s (median of {args.repeats} x {args.steps:,}) |\n|---|---|")
    for name, rate in rows.items():
        print(f"| {name} | {rate:,.0f} |")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    common.write_results(RESULTS, {"steps": args.steps, "repeats": args.repeats, "steps_per_second": rows},
                         args.label)


if __name__ == "__main__":
    main()
