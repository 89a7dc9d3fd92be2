"""How the distributed runtime's sampling scales with the number of actor processes.

Each point is a real `DistributedTrainer` run (learner in this process, actors on Ray, ZeroMQ in
between) with asynchronous sampling and a learner update made cheap on purpose (one epoch, one
minibatch, a large batch), so that the env steps per second measure the actors, not the learner.
The figure is the env frames sampled per wall second after the first update: Ray's start-up, the
actors' start-up and the first batch are left out. Beside it, the raw bound of this machine: the
plainest single-process loop that does the same sampling work (`RawLoop` of `raw_bound.py`, same
environments per process and the same (256, 128) model), measured in the same run before and
after the sweep over actor counts of each environment.

Ray is started once, by this script, with as many CPUs as the largest actor count, and every
trainer joins it. Each actor asks for one CPU of that Ray, so Ray never queues an actor, but the
operating system still has only the machine's cores: on a 2-core machine, 4 actors (plus the
learner) oversubscribe the cores, and the figure shows what that costs or gains.

    python benchmarks/scale/sampling.py [--actors 1 2 4] [--envs CartPole-v1 Pendulum-v1] [--frames 60000]

Prints a Markdown table and writes benchmarks/results/sampling.json.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path

for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(variable, "1")

import psutil  # noqa: E402
import ray  # noqa: E402
import torch  # noqa: E402

from benchmarks import common  # noqa: E402
from benchmarks.scale.raw_bound import RawLoop  # noqa: E402
from lamarckian_hpc.config import RunConfig  # noqa: E402
from lamarckian_hpc.models import ActorCritic  # noqa: E402
from lamarckian_hpc.runtime import TrainResult, UpdateReport  # noqa: E402
from lamarckian_hpc.runtime.placement.process_stats import TreeCpuMeter  # noqa: E402
from lamarckian_hpc.runtime.run_shape import spaces_of  # noqa: E402
from lamarckian_hpc.runtime.runners.distributed import DistributedTrainer  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / "results" / "sampling.json"


def run_config(env_id: str, num_actors: int, num_envs: int, batch_size: int, frames: int) -> RunConfig:
    return RunConfig.model_validate({
        "env": {"id": env_id, "num_envs": num_envs},
        "model": {"policy_hidden_sizes": [256, 128]},
        "algorithm": {"batch_size": batch_size, "num_epochs": 1, "num_minibatches": 1},
        "runtime": {"mode": "ray", "sampling": "async", "num_actors": num_actors, "device": "cpu",
                    "torch_threads": 1},
        "stop": {"total_env_steps": frames},
    })


def machine_busy_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, every process included."""
    times = psutil.cpu_times()
    total = sum(times)
    return total - times.idle - getattr(times, "iowait", 0.0), total


class SteadyState:
    """Observer that measures from the end of the first update to the end of the last one.

    Besides the run's own process tree it reads how busy the whole machine was, so that a figure
    taken while other work shared the cores can be told apart.
    """

    def __init__(self, num_cores: int) -> None:
        self.num_cores = num_cores
        self.first: tuple[int, float] | None = None
        self.last: tuple[int, float] | None = None
        self.cpu_meter: TreeCpuMeter | None = None
        self.cpu_utilization = float("nan")
        self.machine_start = (0.0, 0.0)
        self.machine_utilization = float("nan")
        self.staleness: list[float] = []
        self.first_update_seconds = float("nan")

    def on_update_end(self, report: UpdateReport) -> None:
        now = time.monotonic()
        if self.first is None:
            self.first = (report.env_frames, now)
            self.first_update_seconds = report.wall_time
            self.cpu_meter = TreeCpuMeter(self.num_cores)
            self.machine_start = machine_busy_seconds()
            return
        self.last = (report.env_frames, now)
        self.staleness.append(report.metrics["staleness_mean"])

    def on_train_end(self, result: TrainResult) -> None:
        if self.cpu_meter is not None and self.last is not None:
            self.cpu_utilization = self.cpu_meter.sample()
            busy, total = machine_busy_seconds()
            self.machine_utilization = (busy - self.machine_start[0]) / max(total - self.machine_start[1], 1e-9)

    def frames_and_seconds(self) -> tuple[int, float]:
        if self.first is None or self.last is None:
            return 0, float("nan")
        return self.last[0] - self.first[0], self.last[1] - self.first[1]


def measure_distributed(config: RunConfig, num_cores: int) -> dict:
    observer = SteadyState(num_cores)
    trainer = DistributedTrainer(config, [observer])
    try:
        result = trainer.train()
    finally:
        trainer.close()
    frames, seconds = observer.frames_and_seconds()
    staleness = observer.staleness
    return {
        "steps_per_second": frames / seconds if frames else float("nan"),
        "measured_frames": frames, "measured_seconds": seconds,
        "total_frames": result.env_frames, "total_seconds": result.wall_time_seconds, "updates": result.updates,
        "first_update_seconds": observer.first_update_seconds,
        "staleness_mean": sum(staleness) / len(staleness) if staleness else float("nan"),
        "cpu_utilization": observer.cpu_utilization, "machine_cpu_utilization": observer.machine_utilization,
    }


def measure_raw(config: RunConfig, frames: int) -> float:
    """Steps per second of the raw single-process loop (one short warm-up burst first)."""
    torch.manual_seed(config.seed)
    model = ActorCritic(*spaces_of(config), config.model)
    loop = RawLoop(config, model)
    loop.run(config.env.num_envs * 64)
    return frames / loop.run(frames)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actors", type=int, nargs="+", default=[1, 2, 4], help="actor counts to sweep")
    parser.add_argument("--envs", nargs="+", default=["CartPole-v1", "Pendulum-v1"], help="Gymnasium ids")
    parser.add_argument("--frames", type=int, default=60_000, help="env frames per distributed run")
    parser.add_argument("--raw-frames", type=int, default=30_000, help="env frames per raw-bound measurement")
    parser.add_argument("--num-envs", type=int, default=8, help="environments per actor process")
    parser.add_argument("--batch-size", type=int, default=4096, help="frames per (cheap) learner update")
    parser.add_argument("--output", type=Path, default=RESULTS)
    common.add_common_args(parser)
    args = parser.parse_args()
    if args.frames < 3 * args.batch_size:
        parser.error("--frames must cover at least three batches (the first update is not measured)")

    torch.set_num_threads(1)
    num_cores = os.cpu_count() or 1
    ray.init(address="local", num_cpus=max(args.actors), include_dashboard=False, logging_level=logging.WARNING,
             object_store_memory=100 * 1024 * 1024)
    rows = []
    try:
        for env_id in args.envs:
            raw_config = run_config(env_id, 1, args.num_envs, args.batch_size, args.frames)
            raw_before = measure_raw(raw_config, args.raw_frames)
            points = []
            for num_actors in args.actors:
                config = run_config(env_id, num_actors, args.num_envs, args.batch_size, args.frames)
                points.append((num_actors, measure_distributed(config, num_cores)))
            raw_after = measure_raw(raw_config, args.raw_frames)
            raw = (raw_before + raw_after) / 2
            for num_actors, point in points:
                rows.append({"env": env_id, "num_actors": num_actors, "num_envs_per_actor": args.num_envs,
                             "batch_size": args.batch_size, "raw_steps_per_second": raw,
                             "raw_before": raw_before, "raw_after": raw_after,
                             "ratio_to_raw": point["steps_per_second"] / raw, **point})
    finally:
        ray.shutdown()

    print(f"\nraw bound: one process, {args.num_envs} envs, (256, 128) model, no learning; "
          f"{num_cores} cores\n")
    print("| env | actors | env steps/s sampled | raw bound (steps/s) | ratio to raw | staleness mean | "
          "CPU utilization (run) | CPU busy (machine) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['env']} | {row['num_actors']} | {row['steps_per_second']:,.0f} | "
              f"{row['raw_steps_per_second']:,.0f} | {row['ratio_to_raw']:.2f} | {row['staleness_mean']:.2f} | "
              f"{row['cpu_utilization']:.0%} | {row['machine_cpu_utilization']:.0%} |")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    common.write_results(args.output, {
        "cpus": num_cores, "torch": torch.__version__, "ray": ray.__version__,
        "frames": args.frames, "raw_frames": args.raw_frames,
        "results": rows,
    }, args.label)
    print(f"\nwritten: {args.output}")


if __name__ == "__main__":
    main()
