"""Staleness of asynchronous PPO with flat and tree weight broadcast, as the actors grow.

Each point is a real `DistributedTrainer` run (learner here, actors on one local Ray, ZeroMQ
between them) with `runtime.sampling=async`, `runtime.simulated_nodes = actors / --per-node` and
`runtime.broadcast` flat or tree. The model is large on purpose (two 1024-unit layers, about 4 MB of
float32 weights, the size `broadcast.py` sends), so that a broadcast costs what it would for a
real network; the learner update is kept cheap (one epoch, one minibatch). Staleness is the
learner's own metric: policy versions between the weights that sampled a step and the update that
trains on it; the table shows the mean over updates of each update's mean, and the largest value
seen, leaving out the first `--skip` updates (start-up). Also recorded: the seconds between
updates, which turn a broadcast latency into versions of staleness (used by `scale_model.py`).

All simulated nodes share this machine's cores and loopback, so this measures the tree working
inside a training run, not the network savings of separate hosts (see `broadcast.py
--emulate-links` for those).

    python benchmarks/scale/staleness.py [--actors 2 4 8] [--per-node 2] [--frames 24000] [--output PATH]

Prints a Markdown table and writes benchmarks/results/staleness.json (or `--output`).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import time
from pathlib import Path
from typing import Any

for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(variable, "1")

import ray  # noqa: E402

from benchmarks import common  # noqa: E402
from lamarckian_hpc.config import RunConfig  # noqa: E402
from lamarckian_hpc.runtime.runners.distributed import DistributedTrainer  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / "results" / "staleness.json"


def run_config(actors: int, nodes: int, broadcast: str, frames: int, hidden: int) -> RunConfig:
    return RunConfig.model_validate({
        "env": {"id": "CartPole-v1", "num_envs": 8},
        "model": {"policy_hidden_sizes": [hidden, hidden], "critic_hidden_sizes": [], "share_trunk": True},
        "algorithm": {"batch_size": 1024, "num_epochs": 1, "num_minibatches": 1, "learning_rate": 3e-4},
        "runtime": {"mode": "ray", "sampling": "async", "num_actors": actors, "device": "cpu",
                    "broadcast": broadcast, "simulated_nodes": nodes},
        "stop": {"total_env_steps": frames},
    })


class Staleness:
    """Per-update staleness and the wall time between updates."""

    def __init__(self) -> None:
        self.means: list[float] = []
        self.maxima: list[float] = []
        self.times: list[float] = []

    def on_update_end(self, report: Any) -> None:
        self.means.append(report.metrics["staleness_mean"])
        self.maxima.append(report.metrics["staleness_max"])
        self.times.append(time.monotonic())

    def on_train_end(self, result: Any) -> None:
        pass


def measure(config: RunConfig, skip: int) -> dict[str, Any]:
    observer = Staleness()
    trainer = DistributedTrainer(config, [observer])
    try:
        weight_bytes = sum(a.nbytes for a in trainer.learner.weights().values())
        result = trainer.train()
    finally:
        trainer.close()
    means, maxima, times = observer.means[skip:], observer.maxima[skip:], observer.times[skip:]
    if len(means) < 2:
        raise SystemExit(f"only {len(observer.means)} updates: raise --frames")
    return {
        "weight_bytes": weight_bytes, "updates": result.updates, "measured_updates": len(means),
        "staleness_mean": statistics.fmean(means), "staleness_max": max(maxima),
        "update_interval_s": (times[-1] - times[0]) / (len(times) - 1),
        "env_frames_per_second": result.env_frames / result.wall_time_seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actors", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--per-node", type=int, default=2)
    parser.add_argument("--frames", type=int, default=24000)
    parser.add_argument("--hidden", type=int, default=1024, help="units of each of the two layers")
    parser.add_argument("--skip", type=int, default=2, help="first updates left out (start-up)")
    parser.add_argument("--output", type=Path, default=RESULTS, help="results file (default: %(default)s)")
    common.add_common_args(parser)
    args = parser.parse_args()
    ray.init(address="local", num_cpus=max(args.actors), include_dashboard=False, object_store_memory=100 * 1024 * 1024,
             logging_level=logging.ERROR)
    rows = []
    print("| actors | nodes | broadcast | weights MB | updates | staleness mean | staleness max | s per update |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|")
    try:
        for actors in args.actors:
            nodes = max(1, actors // args.per_node)
            for broadcast in ("flat", "tree"):
                row = {"actors": actors, "nodes": nodes, "broadcast": broadcast,
                       **measure(run_config(actors, nodes, broadcast, args.frames, args.hidden), args.skip)}
                rows.append(row)
                print(f"| {actors} | {nodes} | {broadcast} | {row['weight_bytes'] / 2**20:.1f} | {row['updates']} | "
                      f"{row['staleness_mean']:.2f} | {row['staleness_max']:.0f} | {row['update_interval_s']:.3f} |",
                      flush=True)
    finally:
        ray.shutdown()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    common.write_results(args.output, {
        "rows": rows, "frames": args.frames, "per_node": args.per_node, "hidden": args.hidden, "skip": args.skip,
        "cores": os.cpu_count(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }, args.label)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
