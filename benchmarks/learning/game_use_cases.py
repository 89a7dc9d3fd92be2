"""The built-in game's two use cases, measured in one run: how long a battle and a lineup
evaluation take, the balancing test (NSGA-II over lineups, serially: wall time, non-dominated set,
imbalanced lineups), and automated testing against random play with the same episode budget over
several seeds (bugs found, and after how many episodes).

    python benchmarks/learning/game_use_cases.py [--seeds 5] [--episodes 1500] [--generations 40]

Prints Markdown tables and writes benchmarks/results/game_use_cases.json.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from benchmarks import common
from lamarckian_hpc.config import EvolveConfig, load_config
from lamarckian_hpc.evorl.game_testing_program import search
from lamarckian_hpc.games import BUG_NAMES, Battle, compile_spec, load_game_data
from lamarckian_hpc.games.balance import BalanceProblem
from lamarckian_hpc.games.report import summarize
from lamarckian_hpc.games.testing import random_play
from lamarckian_hpc.population.evolution import evolve

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "game_use_cases.json"


def time_battles(count: int = 2000) -> float:
    data = load_game_data()
    teams = [compile_spec(data, team) for lineup in data.baselines for team in lineup.teams]
    start = time.perf_counter()
    for index in range(count):
        Battle(teams[index % len(teams)], teams[(index * 7 + 3) % len(teams)], data.rules, data.bugs, index).run()
    return (time.perf_counter() - start) / count


def time_evaluations(count: int = 100) -> tuple[float, float]:
    """Seconds per lineup evaluation: every battle played (teams already compiled), and every
    pairing's outcome already memoised."""
    problem = BalanceProblem()
    genomes = problem.initialize(np.random.default_rng(0), count)
    problem.evaluate(genomes)  # compile the teams once
    problem._pairings.clear()
    start = time.perf_counter()
    problem.evaluate(genomes)
    played = (time.perf_counter() - start) / count
    start = time.perf_counter()
    problem.evaluate(genomes)
    return played, (time.perf_counter() - start) / count


def balancing(population_size: int, generations: int) -> dict:
    config = load_config(ROOT / "configs" / "balance.yaml", ["runtime.mode=serial",
                                                             f"algorithm.population_size={population_size}",
                                                             f"algorithm.generations={generations}"], EvolveConfig)
    problem = BalanceProblem()
    start = time.perf_counter()
    algorithm = evolve(config, problem)
    wall = time.perf_counter() - start
    summary = summarize(problem, algorithm.genomes, algorithm.objectives)
    return {"population_size": population_size, "generations": generations, "wall_seconds": wall,
            **summary.to_json_dict()}


def testing(seeds: int, episodes: int) -> list[dict]:
    data = load_game_data().with_bugs(**{name: True for name in BUG_NAMES})
    rows = []
    for seed in range(seeds):
        start = time.perf_counter()
        found = search(data, episodes, 20, seed)
        search_seconds = time.perf_counter() - start
        start = time.perf_counter()
        baseline = random_play(data, episodes, seed)
        random_seconds = time.perf_counter() - start
        rows.append({"seed": seed, "episodes": episodes,
                     "search": {name: report.episode for name, report in found.bugs.items()},
                     "search_states": found.distinct_states, "search_seconds": search_seconds,
                     "random": {name: report.episode for name, report in baseline.bugs.items()},
                     "random_states": baseline.distinct_states, "random_seconds": random_seconds})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--episodes", type=int, default=1500)
    parser.add_argument("--population", type=int, default=60)
    parser.add_argument("--generations", type=int, default=40)
    common.add_common_args(parser)
    args = parser.parse_args()
    battle_ms = 1e3 * time_battles()
    evaluation_ms, memoised_ms = (1e3 * seconds for seconds in time_evaluations())
    print(f"battle: {battle_ms:.2f} ms; lineup evaluation (20 battles): {evaluation_ms:.1f} ms, "
          f"{memoised_ms:.2f} ms with every pairing memoised\n")
    balance = balancing(args.population, args.generations)
    print("| population | generations | wall time (serial) | non-dominated | imbalanced (f2 > 2) | most often strongest |")
    print("|---:|---:|---:|---:|---:|---|")
    top = balance["heroes_to_weaken"][0] if balance["heroes_to_weaken"] else {"hero": "-", "lineups": 0}
    print(f"| {args.population} | {args.generations} | {balance['wall_seconds']:.1f} s | {balance['front_size']} | "
          f"{len(balance['imbalanced'])} | {top['hero']} ({top['lineups']}) |\n")
    rows = testing(args.seeds, args.episodes)
    print("| seed | episodes | search: bugs (found at episode) | random play: bugs (found at episode) | states search / random |")
    print("|---:|---:|---|---|---:|")
    for row in rows:
        shown = [", ".join(f"{name} {episode}" for name, episode in sorted(row[side].items(), key=lambda item: item[1]))
                 for side in ("search", "random")]
        print(f"| {row['seed']} | {row['episodes']} | {len(row['search'])}: {shown[0]} | {len(row['random'])}: "
              f"{shown[1]} | {row['search_states']} / {row['random_states']} |")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    common.write_results(RESULTS, {"battle_ms": battle_ms, "lineup_evaluation_ms": evaluation_ms,
                                   "lineup_evaluation_memoised_ms": memoised_ms,
                                   "balancing": balance, "testing": rows}, args.label)
    print(f"\nwrote {RESULTS}")


if __name__ == "__main__":
    main()
