"""Start-up time and memory of an actor process: the torch-free policy vs the torch policy.

An actor that only acts samples with `runtime/actor/numpy_policy.py` and never imports torch; before,
every actor imported torch to run the same (64, 64) MLP. This script starts actor processes as a
run does and measures both ways. This process stands in for the learner: it makes the learner's
weights, publishes them on a `WeightPublisher` and receives experience on an `ExperienceReceiver`.
Each actor is a fresh interpreter that imports what a Ray actor imports
(`runtime.placement.ray_actors`, Ray included) and runs a real `ActorLoop`: it says hello, waits for the
weights, builds its envs and policy, samples and sends rollouts. `--actors` of them start at once
(with Ray's one-thread environment), for one variant at a time:

- lean: the policy a run's actors use now (`make_sampling_side` without a model);
- torch: `ActorLoop(use_torch=True)`, the torch `ActorCritic` and `TorchPolicy` every actor ran before.

Start-up is the time from starting the process to its hello (imports, config, sockets, envs and
policy built) and to the learner receiving its first rollout (weights loaded, one rollout
sampled). Memory is `psutil.memory_full_info()` of each actor once all have sent a rollout and
sampled a second more: RSS, PSS (shared pages split between the processes sharing them, so N
actors' PSS adds up to what they take together) and USS (its own pages only).
Not included: the Ray core-worker runtime of a real Ray actor, the same for both variants.

    python benchmarks/costs/actor_footprint.py [--config configs/ppo_cartpole.yaml] [--actors 2] [--repeats 3]

Prints a Markdown table of medians over actors and repeats and writes
benchmarks/results/actor_footprint.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import zmq

from benchmarks import common
from lamarckian_hpc.comm import ExperienceReceiver, WeightPublisher
from lamarckian_hpc.config import load_config
from lamarckian_hpc.runtime.algorithms import make_learner
from lamarckian_hpc.runtime.messages import EXPERIENCE, HELLO, KINDS
from lamarckian_hpc.runtime.placement.ray_setup import SINGLE_THREAD_ENV
from lamarckian_hpc.runtime.run_shape import spaces_of

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).resolve().parents[1] / "results" / "actor_footprint.json"
VARIANTS = ("lean", "torch")
OVERRIDES = ["runtime.transport_security=none"]  # CURVE costs both variants alike; no key folder to make
SETTLE_SECONDS = 1.0
TIMEOUT_SECONDS = 120.0

#: One actor process; argv: config file, actor index, actor count, weights address, experience
#: address, variant.
ACTOR = """
import sys
from lamarckian_hpc.runtime.placement import ray_actors  # what Ray imports to start an actor: Ray, the actor loop
from lamarckian_hpc.config import load_config
config_file, index, count, weights, experience, variant = sys.argv[1:7]
config = load_config(config_file, sys.argv[7:])
ray_actors.ActorLoop(config, int(index), int(count), weights, experience, use_torch=variant == "torch").run()
"""


def measure(config_file: str, variant: str, num_actors: int, context: zmq.Context,
            publisher: WeightPublisher) -> list[dict[str, Any]]:
    """Start `num_actors` actor processes of `variant` at once; one row of figures per actor. Each
    start has its own experience socket, so that nothing a killed actor sent can count for a new one."""
    receiver = ExperienceReceiver(context, KINDS)
    environment = {**os.environ, **SINGLE_THREAD_ENV}
    started: dict[int, float] = {}
    processes: dict[int, subprocess.Popen] = {}
    for index in range(num_actors):
        started[index] = time.monotonic()
        processes[index] = subprocess.Popen(
            [sys.executable, "-c", ACTOR, config_file, str(index), str(num_actors), publisher.address,
             receiver.address, variant, *OVERRIDES], cwd=ROOT, env=environment)
    hello: dict[int, float] = {}
    first_rollout: dict[int, float] = {}
    deadline = time.monotonic() + TIMEOUT_SECONDS
    try:
        while len(first_rollout) < num_actors:
            if time.monotonic() > deadline or any(p.poll() is not None for p in processes.values()):
                raise RuntimeError(f"{variant}: an actor ended or did not send a rollout in {TIMEOUT_SECONDS:.0f} s")
            publisher.serve_joins()
            message = receiver.receive(10)
            if message is None:
                continue
            index, now = int(message.meta["actor_index"]), time.monotonic()
            if message.kind == HELLO:
                hello[index] = now - started[index]
            elif message.kind == EXPERIENCE and index in hello and index not in first_rollout:
                first_rollout[index] = now - started[index]
        settle_until = time.monotonic() + SETTLE_SECONDS
        while time.monotonic() < settle_until:  # keep sampling (the learner drains), as in a run
            publisher.serve_joins()
            receiver.receive(10)
        rows = []
        for index, process in processes.items():
            memory = psutil.Process(process.pid).memory_full_info()
            rows.append({"variant": variant, "actor": index, "seconds_to_hello": hello[index],
                         "seconds_to_first_rollout": first_rollout[index], "rss_mib": memory.rss / 2**20,
                         "pss_mib": memory.pss / 2**20, "uss_mib": memory.uss / 2**20})
        return rows
    finally:
        for process in processes.values():
            process.kill()
            process.wait()
        receiver.close()


METRICS = ("seconds_to_hello", "seconds_to_first_rollout", "rss_mib", "pss_mib", "uss_mib")


def summarise(variant: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One variant's medians, and every sample (one per actor start) of each figure."""
    mine = [row for row in rows if row["variant"] == variant]
    return {"variant": variant, "starts": len(mine),
            **{metric: statistics.median(row[metric] for row in mine) for metric in METRICS},
            "samples": {metric: [row[metric] for row in mine] for metric in METRICS}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "ppo_cartpole.yaml"))
    parser.add_argument("--actors", type=int, default=2, help="Actor processes started at once.")
    parser.add_argument("--repeats", type=int, default=3, help="Starts of each variant; they alternate.")
    common.add_common_args(parser)
    args = parser.parse_args()

    config = load_config(args.config, OVERRIDES)
    learner = make_learner(config, *spaces_of(config))
    context = zmq.Context()
    publisher = WeightPublisher(context)
    publisher.publish(0, learner.weights())
    rows: list[dict[str, Any]] = []
    try:
        for repeat in range(args.repeats):
            for variant in VARIANTS:
                rows += [{**row, "repeat": repeat} for row in
                         measure(args.config, variant, args.actors, context, publisher)]
    finally:
        publisher.close()
        context.term()

    results = [summarise(variant, rows) for variant in VARIANTS]
    print(f"\nActor processes of {Path(args.config).name} ({config.env.num_envs} x {config.env.id}, "
          f"model {list(config.model.policy_hidden_sizes)}), {args.actors} started at once, "
          f"medians of {args.actors * args.repeats} starts:\n")
    print("| policy | to hello (s) | to first rollout (s) | RSS (MiB) | PSS (MiB) | USS (MiB) |\n"
          "|---|---:|---:|---:|---:|---:|")
    for m in results:
        print(f"| {m['variant']} | {m['seconds_to_hello']:.2f} | {m['seconds_to_first_rollout']:.2f} | "
              f"{m['rss_mib']:.0f} | {m['pss_mib']:.0f} | {m['uss_mib']:.0f} |")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    common.write_results(RESULTS, {
        "config": Path(args.config).name, "env_id": config.env.id, "num_envs": config.env.num_envs, "policy_hidden_sizes": list(config.model.policy_hidden_sizes),
        "actors": args.actors, "repeats": args.repeats, "results": results}, args.label)
    print(f"\nwrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
