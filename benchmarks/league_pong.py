"""PPO self-play through the league on two-player vector Pong, scored against the scripted player.

The main agent plays the right paddle with PPO (the settings of configs/ppo_pong_vector.yaml);
the left paddle is played by the current main agent (plain self-play, `league.self_play_fraction`)
or a frozen snapshot chosen by PFSP; a snapshot joins the league every 5 updates. The main agent
never meets the scripted player during training. Every 10 updates it plays 20 episodes of
`lamarckian/Pong-v0` against the scripted player (skill 0.6); the score is points won minus lost.

    python benchmarks/league_pong.py [--updates 60] [--seeds 0 1]

Prints a Markdown table and writes benchmarks/results/league_pong.json.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(variable, "1")

import torch  # noqa: E402

from lamarckian_hpc.config import LeagueConfig, ModelConfig, PPOConfig  # noqa: E402
from lamarckian_hpc.envs import parallel_env  # noqa: E402
from lamarckian_hpc.league.ppo_selfplay import LeagueSelfPlay, evaluate_against_scripted  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "league_pong.json"
PPO = PPOConfig(batch_size=2048, num_epochs=4, num_minibatches=4, learning_rate=1e-3, gamma=0.99, gae_lambda=0.95,
                clip_range=0.2, entropy_weight=0.01, value_weight=0.5)
MODEL = ModelConfig(policy_hidden_sizes=(64, 64), critic_hidden_sizes=(), share_trunk=False, activation="tanh")
LEAGUE = LeagueConfig(main_exploiters=0, league_exploiters=0, capacity=64, snapshot_interval=5)


def run(seed: int, updates: int, every: int, episodes: int) -> list[dict[str, float]]:
    selfplay = LeagueSelfPlay(lambda: parallel_env(), 8, LEAGUE, PPO, MODEL, seed=seed)
    rows, training_seconds = [], 0.0
    for update in range(1, updates + 1):
        started = time.perf_counter()
        selfplay.update()
        training_seconds += time.perf_counter() - started
        if update % every == 0:
            score = evaluate_against_scripted(selfplay.main_model, episodes, seed=10_000, opponent_skill=0.6)
            rows.append({"seed": seed, "update": update, "env_frames": selfplay.trainer.sampler.env_frames,
                         "training_seconds": training_seconds, "score_vs_scripted": score,
                         "league_members": len(selfplay.league.members)})
            print(rows[-1], flush=True)
    selfplay.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=60)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--episodes", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = [row for seed in args.seeds for row in run(seed, args.updates, args.every, args.episodes)]
    print("\n| seed | updates | env frames | training seconds | score vs scripted (20 episodes) |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['seed']} | {row['update']} | {row['env_frames']:,} | {row['training_seconds']:.0f} "
              f"| {row['score_vs_scripted']:+.2f} |")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"benchmark": "league_pong", "ppo": PPO.model_dump(), "model": MODEL.model_dump(),
                                   "league": LEAGUE.model_dump(), "load_average": os.getloadavg(), "rows": rows},
                                  indent=2))
    print(f"\nwrote {RESULTS}")


if __name__ == "__main__":
    main()
