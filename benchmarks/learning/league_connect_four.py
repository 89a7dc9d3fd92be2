"""AlphaStar's league on Connect Four (PettingZoo's turn-based connect_four_v3), as a user runs
it: `lamarckian-hpc league configs/league_connect_four.yaml`, one run per seed, and the learning
curve read back from its run file: the main agent's win rate against a uniformly random legal
player (seats alternating game by game), which it never trains against, every 5 generations
(`main_win_rate_vs_scripted`), after the untrained network's (generation 0, measured here with the
same function, `evorl.league_evaluation.play_against_random`, the same games and seed). Then the
untrained and the final main agent (from the run's checkpoint) play a stronger scripted player,
`WinOrBlockConnectFour` (completes its own four, else blocks the opponent's, else random), as
does the random player for reference.

    python benchmarks/learning/league_connect_four.py [--seeds 0] [--generations 40] [overrides ...]

Prints Markdown tables, writes benchmarks/results/league_connect_four.json and the figure beside the page
(docs/benchmarks/figures/league_connect_four.png); then `python -m lamarckian_hpc.analysis.benchmark_pages`
puts the table on docs/benchmarks/learning.md.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from benchmarks import common
from lamarckian_hpc.analysis.plotting import new_figure, save
from lamarckian_hpc.config import load_config
from lamarckian_hpc.config.league_run import LeagueRunConfig
from lamarckian_hpc.evorl.league_evaluation import WinOrBlockConnectFour, play_against, play_against_random
from lamarckian_hpc.evorl.league_learners import initial_weights
from lamarckian_hpc.evorl.league_ppo import SCRIPTED_EVALUATION_SEED
from lamarckian_hpc.mdp import MaskedDiscrete, RandomLegalPolicy
from lamarckian_hpc.models import ActorCritic
from lamarckian_hpc.rl.learner import load_weights
from lamarckian_hpc.runtime.actor.inference import TorchPolicy
from lamarckian_hpc.runtime.actor.multiagent_sampling import make_pettingzoo_mdp
from lamarckian_hpc.runtime.learner.checkpoint import checkpoint_path, load_run_state
from lamarckian_hpc.runtime.runners.multiagent_trainer import default_spaces
from lamarckian_hpc.storage import open_run

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "league_connect_four.yaml"
RESULTS = Path(__file__).resolve().parents[1] / "results" / "league_connect_four.json"
FIGURE = common.FIGURES / "league_connect_four.png"  # beside the page that shows it


def main_agent(config: LeagueRunConfig, weights: dict | None = None) -> TorchPolicy:
    """The untrained network every learner starts from, or the main agent with `weights`."""
    mdp = make_pettingzoo_mdp(config.env)
    mdp.reset(seed=config.seed)
    model = ActorCritic(*default_spaces(mdp), config.model)
    mdp.close()
    load_weights(model, initial_weights(config) if weights is None else weights)
    return TorchPolicy(model)


def against_win_or_block(config: LeagueRunConfig, policy: object) -> float:
    return play_against(policy, WinOrBlockConnectFour(SCRIPTED_EVALUATION_SEED), config.env, config.algorithm.seats,
                        config.algorithm.scripted_evaluation_episodes, SCRIPTED_EVALUATION_SEED).win_rate


def run(seed: int, generations: int, overrides: list[str]) -> dict:
    config = load_config(CONFIG, [f"seed={seed}", f"algorithm.generations={generations}", *overrides],
                         LeagueRunConfig)
    torch.manual_seed(seed)
    untrained = main_agent(config)
    algorithm = config.algorithm
    start = play_against_random(untrained, config.env, algorithm.seats, algorithm.scripted_evaluation_episodes,
                                SCRIPTED_EVALUATION_SEED).win_rate
    with tempfile.TemporaryDirectory() as folder:
        started = time.monotonic()
        subprocess.run([sys.executable, "-m", "lamarckian_hpc", "league", str(CONFIG), f"seed={seed}",
                        f"algorithm.generations={generations}", f"storage.directory={folder}",
                        "storage.run_name=league", *overrides], check=True, cwd=folder)
        wall = time.monotonic() - started
        run_file = Path(folder) / "league.h5"
        with open_run(run_file) as reader:
            metric = reader.metric("main_win_rate_vs_scripted")
            illegal = int(reader.metric("illegal_actions").value[-1])
        final = load_run_state(checkpoint_path(run_file), "league")
        assert final["generation"] == generations, "the checkpoint is not the last generation's"
        trained = main_agent(config, final["members"][0]["weights"])
    win_or_block = {"untrained": against_win_or_block(config, untrained),
                    "final main agent": against_win_or_block(config, trained),
                    "random player": against_win_or_block(config, RandomLegalPolicy(MaskedDiscrete(7), seed))}
    evaluated = np.isfinite(metric.value)
    return {"seed": seed, "wall_seconds": round(wall, 1), "illegal_actions": illegal,
            "games": config.algorithm.scripted_evaluation_episodes,
            "generations": [0, *(metric.policy_version[evaluated] + 1).tolist()],
            "env_frames": [0, *metric.env_frames[evaluated].tolist()],
            "win_rate": [round(start, 3), *np.round(metric.value[evaluated], 3).tolist()],
            "win_rate_vs_win_or_block": {name: round(value, 3) for name, value in win_or_block.items()}}


def draw(runs: list[dict]) -> None:
    figure, (axis,) = new_figure()
    rows = []
    for entry in runs:
        frames = np.array(entry["env_frames"]) / 1000
        axis.plot(frames, entry["win_rate"], marker="o", label=f"main agent, seed {entry['seed']}")
        rows += [{"seed": entry["seed"], "generation": g, "env_frames": f, "win_rate": w}
                 for g, f, w in zip(entry["generations"], entry["env_frames"], entry["win_rate"])]
    axis.axhline(0.5, color="grey", linestyle="--", label="random player (0.5)")
    axis.set_xlabel("env frames of the league, thousands (moves of all learners' games)")
    axis.set_ylabel(f"win rate against random legal player ({runs[0]['games']} games)")
    axis.set_ylim(0, 1)
    axis.legend(loc="lower right")
    save(figure, FIGURE, "League on Connect Four: main agent vs a uniformly random legal player", pd.DataFrame(rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--generations", type=int, default=40)
    parser.add_argument("overrides", nargs="*", help="config overrides for every run (key.path=value)")
    common.add_common_args(parser)
    args = parser.parse_args()
    runs = [run(seed, args.generations, args.overrides) for seed in args.seeds]
    print("| seed | generation | env frames | win rate vs random |\n|---:|---:|---:|---:|")
    for entry in runs:
        for generation, frames, win_rate in zip(entry["generations"], entry["env_frames"], entry["win_rate"]):
            print(f"| {entry['seed']} | {generation} | {frames:,} | {win_rate:.2f} |")
    print("| seed | wall | illegal moves |\n|---:|---:|---:|\n"
          + "\n".join(f"| {e['seed']} | {e['wall_seconds']:.0f} s | {e['illegal_actions']} |" for e in runs))
    print("| seed | win rate vs win-or-block: untrained | final main agent | random player |\n|---:|---:|---:|---:|")
    for entry in runs:
        rates = entry["win_rate_vs_win_or_block"]
        print(f"| {entry['seed']} | {rates['untrained']:.2f} | {rates['final main agent']:.2f} | "
              f"{rates['random player']:.2f} |")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    common.write_results(RESULTS, {"benchmark": "league_connect_four", "config": str(CONFIG.relative_to(ROOT)),
                                   "overrides": args.overrides, "runs": runs}, args.label)
    draw(runs)
    print(f"wrote {RESULTS} and {FIGURE}")


if __name__ == "__main__":
    main()
