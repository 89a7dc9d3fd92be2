"""AlphaStar's league on two-player vector Pong, as a user runs it: `lamarckian-hpc league
configs/league_pong.yaml` (one main agent, one main exploiter, one league exploiter, each a PPO
learner, on forked workers), one run per seed, and the figures read back from its run file.

Per run:
- the main agent's score against the scripted player of `lamarckian/Pong-v0` (skill 0.6, points
  won minus lost over 20 episodes), which it never trains against, every 10 generations;
- each learner's Elo at the end, and the main agent's Elo over the run;
- the exploiters: each one's win rate against its targets (the main agents for a main exploiter,
  the snapshots for a league exploiter) before each of its resets, and how the main exploiter's win
  rate against the main agent rose and fell: the generation it first beat the main agent (win rate
  above 0.5) and whether the main agent won most games again against the exploiter's later
  restarts (recovered);
- snapshots and resets, league members, wall time.

    python benchmarks/learning/league_pong.py [--seeds 0 1] [--generations 60] [overrides ...]

Prints a Markdown table and writes benchmarks/results/league_pong.json.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks import common
from lamarckian_hpc.league.store import read_league
from lamarckian_hpc.storage import open_run

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "league_pong.yaml"
RESULTS = Path(__file__).resolve().parents[1] / "results" / "league_pong.json"


def finite(values: np.ndarray) -> list[float]:
    return [round(float(v), 3) for v in values if math.isfinite(v)]


def summarize(path: Path, seed: int, wall_seconds: float) -> dict:
    with open_run(path) as reader:
        series = {name: reader.metric(name) for name in reader.metric_names()}
    league = read_league(path)
    scripted = series["main_score_vs_scripted"]
    evaluated = np.isfinite(scripted.value)
    exploiter = series["win_rate_vs_targets_main_exploiter_0"].value
    resets = series["resets"].value
    beat = np.flatnonzero(exploiter > 0.5)
    first_reset = int(np.flatnonzero(resets > 0)[0]) if (resets > 0).any() else len(resets)
    later = exploiter[first_reset + 1:]
    scores = finite(scripted.value)
    elo = {name: round(float(series[f"elo_{name}"].value[-1]), 1)
           for name in ("main_0", "main_exploiter_0", "league_exploiter_0")}
    summary = {
        "seed": seed, "generations": len(resets), "wall_seconds": round(wall_seconds, 1),
        "main_vs_scripted_first": scores[0], "main_vs_scripted_last": scores[-1],
        "main_vs_scripted_best": max(scores), "elo_main": elo["main_0"], "elo_main_exploiter": elo["main_exploiter_0"],
        "elo_league_exploiter": elo["league_exploiter_0"],
        "main_exploiter_beats_main_at": int(beat[0]) + 1 if len(beat) else None,
        "main_exploiter_peak_win_rate": round(float(exploiter[:first_reset + 1].max()), 3),
        "main_recovered": bool(len(later) and float(np.median(later)) < 0.5),
        "snapshots": int(sum(role == 3 for role in league.roles)), "resets": int(resets.sum()),
        "matches": int(len(league.matches.get("learner", []))),
    }
    curves = {"scripted_generations": (scripted.policy_version[evaluated] + 1).tolist(),
              "main_score_vs_scripted": scores, "main_elo": finite(series["elo_main_0"].value),
              "main_exploiter_win_rate_vs_main": finite(exploiter),
              "league_exploiter_win_rate_vs_snapshots": finite(series["win_rate_vs_targets_league_exploiter_0"].value)}
    return {"summary": summary, "curves": curves}


def run(seed: int, generations: int, overrides: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        started = time.monotonic()
        subprocess.run([sys.executable, "-m", "lamarckian_hpc", "league", str(CONFIG), f"seed={seed}",
                        f"algorithm.generations={generations}", f"storage.directory={folder}",
                        "storage.run_name=league", *overrides], check=True, cwd=folder)
        return summarize(Path(folder) / "league.h5", seed, time.monotonic() - started)


def print_table(rows: list[dict]) -> None:
    print("| seed | main vs scripted (first -> last) | Elo main / main exploiter / league exploiter | "
          "main exploiter beats main (generation, peak) | main recovered | snapshots, resets | wall |")
    print("|---:|---|---|---|---|---|---:|")
    for row in rows:
        print(f"| {row['seed']} | {row['main_vs_scripted_first']:+.2f} -> {row['main_vs_scripted_last']:+.2f} "
              f"(best {row['main_vs_scripted_best']:+.2f}) | {row['elo_main']:.0f} / {row['elo_main_exploiter']:.0f} / "
              f"{row['elo_league_exploiter']:.0f} | {row['main_exploiter_beats_main_at']}, "
              f"{row['main_exploiter_peak_win_rate']:.2f} | {'yes' if row['main_recovered'] else 'no'} | "
              f"{row['snapshots']}, {row['resets']} | {row['wall_seconds']:.0f} s |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--generations", type=int, default=60)
    parser.add_argument("overrides", nargs="*", help="config overrides for every run (key.path=value)")
    common.add_common_args(parser)
    args = parser.parse_args()
    runs = [run(seed, args.generations, args.overrides) for seed in args.seeds]
    rows = [entry["summary"] for entry in runs]
    print_table(rows)
    common.write_results(RESULTS, {"benchmark": "league_pong", "config": str(CONFIG.relative_to(ROOT)),
                                   "overrides": args.overrides, "rows": rows,
                                   "curves": {str(row["seed"]): entry["curves"] for row, entry in zip(rows, runs)}},
                         args.label)
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
