"""League versus naive self-play on biased rock-paper-scissors: the main agent's exploitability.

Both start from the same rock-heavy mixed strategy (logits 1, 0, -1) and learn by the exact policy
gradient at the same rate. Self-play trains against its current self; the league's main agent
trains against PFSP-chosen snapshots and the current main agent, next to a main exploiter and a
league exploiter (AlphaStar's roles, `lamarckian_hpc.league`). Exploitability is what a best
response wins against the policy (0 at the equilibrium 1/4, 1/2, 1/4). The league of the first
seed is written to a run file (`/league`: payoff, Elo, members) and read back.

    python benchmarks/learning/league_rps.py [--updates 3000] [--seeds 3]

Prints a Markdown table of exploitability per fifth of training and writes
benchmarks/results/league_rps.json (and docs/benchmarks/figures/league_rps.png when matplotlib is installed).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks import common
from lamarckian_hpc.config import LeagueConfig
from lamarckian_hpc.league import Role
from lamarckian_hpc.league.matrix_game import (
    BIASED_ROCK_PAPER_SCISSORS,
    exploitability,
    league_training,
    self_play,
    softmax,
)
from lamarckian_hpc.league.store import LeagueRunWriter, read_league

RESULTS = Path(__file__).resolve().parents[1] / "results"
START = np.array([1.0, 0.0, -1.0])
LEARNING_RATE = 0.1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=3000)
    parser.add_argument("--seeds", type=int, default=3)
    common.add_common_args(parser)
    args = parser.parse_args()
    config = LeagueConfig(capacity=512, snapshot_interval=20, exploiter_max_updates=40)
    naive = self_play(BIASED_ROCK_PAPER_SCISSORS, START, args.updates, LEARNING_RATE)
    runs, seconds = [], []
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "league_rps.h5"
        writer = LeagueRunWriter(path, {"league": config.model_dump()}, ["main_exploitability"],
                                 league_capacity=config.capacity)

        def on_round(league, index):
            if index % 100 == 99:
                main = league.of_role(Role.MAIN_AGENT)[0]
                policy = softmax(league.members[main].params)
                writer.append("main_exploitability", exploitability(BIASED_ROCK_PAPER_SCISSORS, policy),
                              env_frames=index + 1, policy_version=index + 1)
                writer.write_league(league)

        for seed in range(args.seeds):
            started = time.perf_counter()
            run, league = league_training(BIASED_ROCK_PAPER_SCISSORS, START, args.updates, LEARNING_RATE, config,
                                          seed=seed, on_round=on_round if seed == 0 else None)
            seconds.append(time.perf_counter() - started)
            runs.append(run)
        writer.close()
        record = read_league(path)
    windows = 5
    naive_windows = naive.window_means(windows)
    league_windows = np.array([run.window_means(windows) for run in runs])
    print(f"\nBiased rock-paper-scissors, {args.updates} updates, learning rate {LEARNING_RATE}, "
          f"{args.seeds} league seeds\n")
    print("| fifth of training | self-play exploitability | league main agent exploitability (mean, min..max over seeds) |")
    print("|---|---|---|")
    for k in range(windows):
        column = league_windows[:, k]
        print(f"| {k + 1} | {naive_windows[k]:.2f} | {column.mean():.2f} ({column.min():.2f}..{column.max():.2f}) |")
    top = np.argsort(record.elo)[::-1][:3]
    print(f"\nself-play favourite action changed {naive.cycles()} times; league members (seed 0): {len(record.names)}, "
          f"highest Elo: " + ", ".join(f"{record.names[i]} {record.elo[i]:.0f}" for i in top))
    print(f"seconds per league run: {np.mean(seconds):.1f}")
    result = {"benchmark": "league_rps", "game": BIASED_ROCK_PAPER_SCISSORS.tolist(), "start_logits": START.tolist(),
              "updates": args.updates, "learning_rate": LEARNING_RATE, "league": config.model_dump(),
              "self_play_windows": naive_windows, "self_play_cycles": naive.cycles(),
              "league_windows": league_windows.tolist(), "seconds_per_league_run": seconds,
              "league_members_seed0": len(record.names),
              "highest_elo_seed0": {record.names[i]: float(record.elo[i]) for i in top}}
    RESULTS.mkdir(parents=True, exist_ok=True)
    common.write_results(RESULTS / "league_rps.json", result, args.label)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    figure, axis = plt.subplots(figsize=(7, 3.5))
    axis.plot(naive.exploitability, label="naive self-play", color="tab:red", linewidth=0.8)
    for seed, run in enumerate(runs):
        axis.plot(run.exploitability, label=f"league main agent (seed {seed})", linewidth=0.8, alpha=0.8)
    axis.set_xlabel("updates")
    axis.set_ylabel("exploitability")
    axis.set_title("Biased rock-paper-scissors")
    axis.legend(fontsize=7)
    figure.tight_layout()
    common.FIGURES.mkdir(parents=True, exist_ok=True)
    figure.savefig(common.FIGURES / "league_rps.png", dpi=120)
    print(f"wrote {RESULTS / 'league_rps.json'} and {common.FIGURES / 'league_rps.png'}")


if __name__ == "__main__":
    main()
