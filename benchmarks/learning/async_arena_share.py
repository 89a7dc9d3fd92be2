"""The asynchronous arena: what training buys over random play, and the slow player's share of the
coins as its period grows.

Trains `configs/multiagent_async_arena.yaml` (one policy shared by a fast player acting every world
tick, a slow one every 4th and a late joiner every 2nd) on the distributed runtime (local Ray,
actor processes), then evaluates on the arena's real sampler, same episode seeds for every row:

- trained vs uniformly random play: mean coins per player per episode, per player;
- the slow player's period set to 1, 2, 4, 8 (the fast one stays at 1): the slow player's share of
  all coins collected. By default the ONE trained policy is evaluated under each period (its
  observation carries 1/period, and it saw periods 1, 2 and 4 in training); `--retrain` instead
  trains a fresh run per period and evaluates each at its own period.

    python benchmarks/learning/async_arena_share.py [--frames 60000] [--episodes 64] [--periods 1 2 4 8] [--retrain]

Prints Markdown tables and writes benchmarks/results/async_arena_share.json (the page's tables:
python -m lamarckian_hpc.analysis.benchmark_pages).
"""

from __future__ import annotations

import argparse
import math
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import common
from lamarckian_hpc.config import RunConfig, load_config
from lamarckian_hpc.mdp import PolicyOutput
from lamarckian_hpc.runtime.actor.multiagent_sampling import make_multiagent_side, policy_weights
from lamarckian_hpc.runtime.runners.distributed import DistributedTrainer

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "multiagent_async_arena.yaml"
RESULTS = ROOT / "benchmarks" / "results"
EVALUATION_SEED = 10_000  # episodes no training run reset with


class UniformRandom:
    """A policy that picks each move uniformly: the baseline of every table."""

    def __init__(self, num_actions: int, seed: int) -> None:
        self.num_actions, self.rng = num_actions, np.random.default_rng(seed)

    def __call__(self, observations: np.ndarray) -> PolicyOutput:
        actions = self.rng.integers(self.num_actions, size=len(observations))
        return PolicyOutput(actions, np.full(len(observations), -math.log(self.num_actions)))


def period_of(config: RunConfig, player: str) -> int:
    kwargs = config.env.kwargs
    return kwargs["players"][player] if player in kwargs["players"] else kwargs["joins"][player].get("period", 1)


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    return "\n".join(lines + ["| " + " | ".join(str(value) for value in row.values()) + " |" for row in rows])


def with_slow_period(config: RunConfig, period: int) -> RunConfig:
    kwargs = dict(config.env.kwargs)
    kwargs["players"] = {**kwargs["players"], "slow": period}
    return config.model_copy(update={"env": config.env.model_copy(update={"kwargs": kwargs})})


def train(config: RunConfig) -> tuple[dict[str, np.ndarray], list[tuple[int, float]], float]:
    """The run's final weights, its curve (env frames, recent mean coins per player) and wall seconds."""
    curve: list[tuple[int, float]] = []

    class Curve:
        def on_update_end(self, report: Any) -> None:
            if report.recent_return_mean is not None:
                curve.append((report.env_frames, round(report.recent_return_mean, 2)))

        def on_train_end(self, result: Any) -> None:
            pass

    started = time.perf_counter()
    trainer = DistributedTrainer(config, [Curve()])
    try:
        trainer.train()
        weights = trainer.learner.weights()
    finally:
        trainer.close()
    return weights, curve, time.perf_counter() - started


def evaluate(config: RunConfig, weights: dict[str, np.ndarray] | None, episodes: int) -> dict[str, Any]:
    """Coins per player per episode over `episodes` episodes of every environment's first ones (the
    sampler's seeds), acting with the trained weights or, with None, uniformly at random."""
    assert config.multiagent is not None
    side = make_multiagent_side(config, EVALUATION_SEED)
    try:
        if weights is None:
            for policy_id in side.policies:
                side.sampler.policies[policy_id] = UniformRandom(5, EVALUATION_SEED)
        else:
            for policy_id, state in policy_weights(weights, side.policies).items():
                side.load_policy_weights(policy_id, state)
        rounds = math.ceil(episodes / config.env.num_envs)
        for _ in range(rounds * config.env.kwargs.get("max_ticks", 200)):
            side.sampler.tick()
            for buffer in side.experiences.values():  # evaluation: nothing is learned from these
                buffer.take()
        results = side.sampler.take_completed()
    finally:
        side.close()
    coins: dict[str, list[float]] = defaultdict(list)
    for result in results:
        coins[str(result.agent_id)].append(result.episode_return)
    total = sum(sum(values) for values in coins.values())
    return {"episodes": rounds * config.env.num_envs,
            "mean_coins_per_player": round(float(np.mean([r.episode_return for r in results])), 2),
            "mean_coins": {player: round(float(np.mean(values)), 2) for player, values in sorted(coins.items())},
            "slow_share": round(sum(coins["slow"]) / total, 3) if total else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=60_000, help="env frames (world ticks) of a training run")
    parser.add_argument("--episodes", type=int, default=64, help="evaluation episodes per row")
    parser.add_argument("--periods", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--retrain", action="store_true", help="train one run per slow period instead of "
                                                                "evaluating the one trained policy under each")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=RESULTS / "async_arena_share.json")
    common.add_common_args(parser)
    args = parser.parse_args()
    config = load_config(CONFIG, [f"stop.total_env_steps={args.frames}", f"seed={args.seed}"])
    weights, curve, seconds = train(config)
    trained, random = evaluate(config, weights, args.episodes), evaluate(config, None, args.episodes)
    players = list(trained["mean_coins"])
    policies = [{"policy": name, "mean coins per player per episode": row["mean_coins_per_player"],
                 **{f"{player} (period {period_of(config, player)})": row["mean_coins"][player] for player in players}}
                for name, row in (("trained", trained), ("uniformly random", random))]
    print(f"trained {args.frames} frames in {seconds:.1f} s; evaluation over {trained['episodes']} episodes\n")
    print(markdown(policies))

    shares = []
    for period in args.periods:
        periodic = with_slow_period(config, period)
        period_weights = train(periodic)[0] if args.retrain else weights
        t, r = evaluate(periodic, period_weights, args.episodes), evaluate(periodic, None, args.episodes)
        shares.append({"slow period": period, "trained: slow share": t["slow_share"],
                       "trained: slow coins": t["mean_coins"]["slow"], "trained: fast coins": t["mean_coins"]["fast"],
                       "random: slow share": r["slow_share"], "random: slow coins": r["mean_coins"]["slow"],
                       "random: fast coins": r["mean_coins"]["fast"]})
    how = "a run trained per period" if args.retrain else "the one trained policy evaluated under each period"
    print(f"\nslow player's share of the coins ({how}):\n")
    print(markdown(shares))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    common.write_results(args.output, {
        "config": str(CONFIG.relative_to(ROOT)), "frames": args.frames, "seed": args.seed,
        "evaluation_seed": EVALUATION_SEED, "evaluation_episodes": trained["episodes"],
        "train_seconds": round(seconds, 1), "shares_by": "retrain" if args.retrain else "evaluation",
        "curve": [{"env frames": frames, "recent mean coins per player": coins} for frames, coins in curve],
        "policies": policies, "shares": shares}, args.label, indent=1)
    print(f"\nwrote {args.output}")


if __name__ == "__main__":
    main()
