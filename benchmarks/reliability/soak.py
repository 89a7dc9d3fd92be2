"""Soak: many actors for a long time; memory and file descriptors of every process must stay flat
and no experience message may go missing.

    python benchmarks/reliability/soak.py --actors 32 --minutes 10     # the issue's setting
    python benchmarks/reliability/soak.py --actors 8 --minutes 2       # a quick look

Samples the resident memory (RSS) and open file descriptors of the learner and of every actor
process every few seconds. Growth is measured from the end of the warm-up (the first fifth of the
run) to the end; the target is under 5%. Lost messages are gaps in each actor's message numbering
(`lost_messages`). Prints a table and writes benchmarks/results/soak.json.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import psutil

from benchmarks import common
from lamarckian_hpc.config import load_config
from lamarckian_hpc.runtime.runners.distributed import DistributedTrainer

ROOT = Path(__file__).resolve().parents[2]

RESULTS = ROOT / "benchmarks" / "results" / "soak.json"


def _usage(pid: int) -> tuple[float, int] | None:
    try:
        process = psutil.Process(pid)
        return process.memory_info().rss / 2**20, process.num_fds()
    except psutil.Error:
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actors", type=int, default=32)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--sample-seconds", type=float, default=5.0)
    common.add_common_args(parser)
    args = parser.parse_args()
    seconds = args.minutes * 60
    config = load_config(ROOT / "configs" / "ppo_cartpole.yaml", [
        "runtime.mode=ray", f"runtime.num_actors={args.actors}", "env.num_envs=2", "algorithm.batch_size=4096",
        "stop.target_return=null", "stop.total_env_steps=1000000000", f"stop.max_wall_seconds={seconds}"])
    samples: dict[str, list[tuple[float, float, int]]] = {}
    last = {"metrics": {}, "sampled_at": -1e9, "all_up_at": None}

    class Sampler:
        def on_update_end(self, report) -> None:
            last["metrics"] = report.metrics
            if last["all_up_at"] is None and len(trainer.actor_pids) == args.actors:
                last["all_up_at"] = report.wall_time  # every actor process has connected
            if report.wall_time - last["sampled_at"] < args.sample_seconds:
                return
            last["sampled_at"] = report.wall_time
            pids = {"learner": os.getpid(), **{f"actor-{i}": pid for i, pid in trainer.actor_pids.items()}}
            for name, pid in pids.items():
                usage = _usage(pid)
                if usage is not None:
                    samples.setdefault(f"{name}:{pid}", []).append((report.wall_time, *usage))
            print(f"{report.wall_time:7.0f} s  frames {report.env_frames:>12,}  processes {len(pids)}  "
                  f"learner rss {samples[f'learner:{os.getpid()}'][-1][1]:.0f} MB", flush=True)

        def on_train_end(self, result) -> None:
            pass

    trainer = DistributedTrainer(config, [Sampler()])
    started = time.monotonic()
    try:
        result = trainer.train()
    finally:
        trainer.close()
    # Warm-up: the first fifth of the run, and at least until every actor has connected (each one
    # adds its sockets to the learner's descriptors) plus 10 s.
    warm = max(seconds / 5, (last["all_up_at"] or seconds) + 10)
    rows = []
    for name, series in sorted(samples.items()):
        after = [s for s in series if s[0] >= warm]
        if len(after) < 2:
            continue
        rss0, fd0 = after[0][1], after[0][2]
        rows.append({"process": name, "samples": len(after), "rss_mb_start": round(rss0, 1),
                     "rss_mb_end": round(after[-1][1], 1), "rss_growth": round(after[-1][1] / rss0 - 1, 4),
                     "fds_start": fd0, "fds_end": after[-1][2], "fd_growth": round(after[-1][2] / max(fd0, 1) - 1, 4)})
    worst_rss = max((row["rss_growth"] for row in rows), default=float("nan"))
    worst_fd = max((row["fd_growth"] for row in rows), default=float("nan"))
    lost = int(last["metrics"].get("lost_messages", -1))
    print(f"\n{'process':<22} {'RSS MB start':>12} {'end':>8} {'growth':>8} {'fds start':>9} {'end':>5} {'growth':>7}")
    for row in rows:
        print(f"{row['process']:<22} {row['rss_mb_start']:>12} {row['rss_mb_end']:>8} {row['rss_growth']:>8.2%} "
              f"{row['fds_start']:>9} {row['fds_end']:>5} {row['fd_growth']:>7.2%}")
    summary = {"actors": args.actors, "minutes": args.minutes, "all_actors_connected_at": last["all_up_at"],
               "measured_from_seconds": warm, "wall_seconds": round(time.monotonic() - started, 1),
               "env_frames": result.env_frames, "actor_restarts": trainer.actor_restarts,
               "worst_rss_growth": worst_rss, "worst_fd_growth": worst_fd, "lost_messages": lost,
               "malformed_messages": int(last["metrics"].get("malformed_messages", -1)),
               "target_met": worst_rss < 0.05 and worst_fd < 0.05 and lost == 0}
    print(json.dumps(summary, indent=2))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    common.write_results(RESULTS, {"summary": summary, "processes": rows, "samples": samples}, args.label)
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
