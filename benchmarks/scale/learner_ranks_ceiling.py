"""How the learner's data-parallel ranks scale on whole cores: N ranks, each one torch thread
pinned to a core of its own, share one global batch.

`learner_ceiling.py` measures one learner fed at full speed; `learner_scaling.py` measures whole
runs, whose ranks on a small machine get a fraction of a core each and wait, in lockstep, for the
slowest. This one isolates the learner side: no actors, no transport, no Ray. For each workload
and each N, N processes are started, rank r pinned to the r-th core it may use
(`os.sched_setaffinity`, 1 torch thread), form a gloo group on 127.0.0.1 (`form_group`), and each
holds 1/N of the same global batch (the config's batch size; random observations of the
workload's shapes, as in `learner_ceiling.py`). After one warm-up update, `--updates` updates are
timed, each started together (a barrier) and each as long as its slowest rank.

Reported per (workload, N): trained env steps/s (global batch / median update seconds), the
speed-up over N=1, and the ms per update spent in collectives (`reducer.collective_seconds`,
waiting for the slowest rank included; the mean over ranks).

    python benchmarks/scale/learner_ranks_ceiling.py [--workloads cartpole pong-nature] [--ranks 1 2 4 8]
                                               [--updates 3] [--cnn-batch-size 2048]
                                               [--budget-seconds 120] [--quick] [--output FILE]

`--budget-seconds` skips a (workload, N) whose predicted time (from N=1's update, divided by N)
would end past the budget, and says so in the table and the JSON. `--quick` is a dry run: tiny
batches, N in 1 2, one timed update. Prints a Markdown table and writes
benchmarks/results/learner_ranks_ceiling.json with the machine it ran on.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import common

ROOT = Path(__file__).resolve().parents[2]

RESULTS = ROOT / "benchmarks" / "results" / "learner_ranks_ceiling.json"
#: Seconds a rank's process takes to start, import torch and join the group, when none was measured.
START_SECONDS = 5.0


def rank_main(task: dict[str, Any]) -> None:
    """One rank: pin to its core, join the group, time the updates on its shard, write its JSON."""
    rank, world_size = task["rank"], task["world_size"]
    os.sched_setaffinity(0, {task["core"]})
    import gymnasium as gym
    import torch
    import torch.distributed as dist

    from benchmarks.scale.learner_ceiling import WORKLOADS, synthetic_experience, workload_config
    from lamarckian_hpc.runtime.algorithms import make_learner
    from lamarckian_hpc.runtime.learner.group import LearnerGroupSpec, form_group

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    workload = WORKLOADS[task["workload"]]
    config = workload_config(workload, "ppo", 1, "cpu", task["batch_size"])
    joined = time.monotonic()
    reducer = form_group(LearnerGroupSpec(rank, world_size, "127.0.0.1", task["port"], timeout_seconds=60.0))
    joined = time.monotonic() - joined
    learner = make_learner(config, workload.observation_space, gym.spaces.Discrete(workload.actions), reducer=reducer)
    shard = config.algorithm.batch_size // world_size
    experience = synthetic_experience(workload.observation_space, workload.actions, shard, seed=rank)
    seconds, collective = [], []
    for index in range(task["updates"] + 1):
        dist.barrier()
        before = reducer.collective_seconds
        started = time.perf_counter()
        learner.update(experience, env_frames=index * config.algorithm.batch_size)
        seconds.append(time.perf_counter() - started)
        collective.append(reducer.collective_seconds - before)
    result = {"rank": rank, "core": task["core"], "affinity": sorted(os.sched_getaffinity(0)),
              "threads": torch.get_num_threads(), "shard": len(experience), "join_seconds": joined,
              "update_seconds": seconds, "collective_seconds": collective,
              "ray_imported": "ray" in sys.modules}
    reducer.close()
    Path(task["output"]).write_text(json.dumps(result))


def run_ranks(workload: str, world_size: int, batch_size: int, updates: int, cores: list[int]) -> dict[str, Any]:
    """Start `world_size` rank processes, wait for them, and combine what they measured."""
    from lamarckian_hpc.runtime.learner.group import free_port

    port = free_port("127.0.0.1")
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                   "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ranks_ceiling_") as folder:
        processes = []
        for rank in range(world_size):
            task = {"rank": rank, "world_size": world_size, "core": cores[rank], "port": port, "workload": workload,
                    "batch_size": batch_size, "updates": updates, "output": str(Path(folder) / f"{rank}.json")}
            processes.append(subprocess.Popen([sys.executable, __file__, "--rank-task", json.dumps(task)],
                                              env=environment, cwd=ROOT))
        codes = [process.wait() for process in processes]
        if any(codes):
            raise RuntimeError(f"{workload} with {world_size} ranks: rank exit codes {codes}")
        ranks = [json.loads((Path(folder) / f"{rank}.json").read_text()) for rank in range(world_size)]
    wall = time.monotonic() - started
    # an update is as long as its slowest rank (they started together, at a barrier)
    timed = [max(rank["update_seconds"][index] for rank in ranks) for index in range(1, updates + 1)]
    median = statistics.median(timed)
    collective = statistics.mean(statistics.median(rank["collective_seconds"][1:]) for rank in ranks)
    batch = sum(rank["shard"] for rank in ranks)
    return {"workload": workload, "ranks": world_size, "batch": batch, "shard": ranks[0]["shard"],
            "cores": [rank["core"] for rank in ranks],
            "pinned": all(rank["affinity"] == [rank["core"]] for rank in ranks),
            "threads_per_rank": ranks[0]["threads"], "warmup_seconds": max(rank["update_seconds"][0] for rank in ranks),
            "update_seconds": median, "update_seconds_all": timed, "steps_per_second": batch / median,
            "collective_ms_per_update": collective * 1e3, "join_seconds": max(rank["join_seconds"] for rank in ranks),
            "wall_seconds": wall, "ray_imported_by_ranks": any(rank["ray_imported"] for rank in ranks)}


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    import torch

    model = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        model = next((line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
                      if line.startswith("model name")), "")
    return {"host": platform.node(), "cpu_model": model, "cores": os.cpu_count(),
            "usable_cores": len(os.sched_getaffinity(0)), "load_average": list(os.getloadavg()),
            "python": platform.python_version(), "torch": torch.__version__, "platform": platform.platform()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rank-task", help=argparse.SUPPRESS)
    parser.add_argument("--workloads", nargs="+", default=["cartpole", "pong-nature"])
    parser.add_argument("--ranks", nargs="+", type=int, default=[1, 2, 4, 8])
    parser.add_argument("--updates", type=int, default=3, help="timed updates per row (after one warm-up)")
    parser.add_argument("--cnn-batch-size", type=int, default=2048,
                        help="the image workloads' global batch (the config's 8,192 with the same minibatch "
                             "size, fewer of them; 0: the config's)")
    parser.add_argument("--batch-size", type=int, help="every other workload's global batch (default: the config's)")
    parser.add_argument("--budget-seconds", type=float, default=120.0,
                        help="skip a (workload, N) predicted to end past this many seconds from the start")
    parser.add_argument("--quick", action="store_true", help="dry run: tiny batches, N in 1 2, one timed update")
    parser.add_argument("--output", type=Path, default=RESULTS)
    common.add_common_args(parser)
    args = parser.parse_args()
    if args.rank_task:
        rank_main(json.loads(args.rank_task))
        return

    from benchmarks.scale.learner_ceiling import WORKLOADS

    unknown = sorted(set(args.workloads) - set(WORKLOADS))
    if unknown:
        parser.error(f"--workloads: unknown {unknown}; allowed: {', '.join(WORKLOADS)}")
    if args.quick:
        args.ranks, args.updates, args.cnn_batch_size, args.batch_size = [1, 2], 1, 64, 128
    cores = sorted(os.sched_getaffinity(0))
    if min(args.ranks) < 1:
        parser.error(f"--ranks: each must be >= 1, got {args.ranks}")
    began = time.monotonic()
    load_before = list(os.getloadavg())
    rows: list[dict[str, Any]] = [{"workload": name, "ranks": count, "skipped": f"only {len(cores)} usable cores"}
                                  for name in args.workloads for count in args.ranks if count > len(cores)]
    ranks = sorted({count for count in args.ranks if count <= len(cores)})
    print("| workload | ranks | global batch (per rank) | update (s) | trained env steps/s | speed-up | "
          "collectives ms/update |\n|---|---:|---:|---:|---:|---:|---:|", flush=True)
    for name in args.workloads:
        image = WORKLOADS[name].observation_space.dtype.name == "uint8"
        batch = (args.cnn_batch_size or None) if image else args.batch_size
        single: dict[str, Any] | None = None
        for count in ranks:
            elapsed = time.monotonic() - began
            if single is not None:
                compute = (args.updates + 1) * single["update_seconds"] / count
                predicted = single["join_seconds"] + START_SECONDS + compute
                if elapsed + predicted > args.budget_seconds:
                    rows.append({"workload": name, "ranks": count, "skipped": f"predicted {predicted:.0f} s after "
                                 f"{elapsed:.0f} s, past the {args.budget_seconds:g} s budget"})
                    print(f"| {name} | {count} | skipped: {rows[-1]['skipped']} |||||", flush=True)
                    continue
            row = run_ranks(name, count, batch, args.updates, cores)
            if count == 1:
                single = row
            row["speed_up"] = row["steps_per_second"] / single["steps_per_second"] if single else None
            rows.append(row)
            speed_up = f"{row['speed_up']:.2f}x" if row["speed_up"] else "-"
            print(f"| {name} | {count} | {row['batch']:,} ({row['shard']:,}) | {row['update_seconds']:.3f} | "
                  f"{row['steps_per_second']:,.0f} | {speed_up} | {row['collective_ms_per_update']:.1f} |", flush=True)
    result = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "machine": machine(), "load_average_before": load_before,
              "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]), "updates": args.updates,
              "quick": args.quick, "elapsed_seconds": time.monotonic() - began, "rows": rows,
              "ray_imported": "ray" in sys.modules or any(row.get("ray_imported_by_ranks") for row in rows)}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    common.write_results(args.output, result, args.label)
    info = result["machine"]
    print(f"machine: {info['cpu_model'] or '?'}, {info['usable_cores']} of {info['cores']} cores usable, load average "
          f"{' '.join(f'{value:.2f}' for value in info['load_average'])}, torch {info['torch']}; "
          f"ray imported: {result['ray_imported']}; elapsed {result['elapsed_seconds']:.0f} s; written: {args.output}")
    if result["ray_imported"]:
        raise SystemExit("ray was imported: this benchmark must not need it")


if __name__ == "__main__":
    main()
