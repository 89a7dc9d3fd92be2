"""What a CPU quota does to a lockstep of learner ranks: gloo all-reduce milliseconds of a model's
gradients (`--parameters` float32; CartPole's 34,563 by default) between N local processes, each free
or in a CFS group of its own.

`learner_scaling.py` emulates a host per rank with a fractional-core quota, and its ranks meet in an
all-reduce at every minibatch step. A rank on a host of its own runs without pause; a rank in a
0.175-core group runs 1.75 ms of every 10 ms period and is stopped for the rest, so a collective
waits for whichever rank is stopped. Each rank here does `--compute-ms` of busy work (a minibatch's
share), then the all-reduce; the figure is the mean all-reduce milliseconds (waiting included) and
the mean step, for each setting. Root needed for the groups (cgroup v1 cpu, `cpu_groups.CpuGroup`).

    python benchmarks/scale/allreduce_under_quota.py --ranks 2 4 --cpus 0.175 --periods-us 10000 100000
    python benchmarks/scale/allreduce_under_quota.py --parameters 1687719 --compute-ms 28 --cpus 0.1 \
        --periods-us 10000 --label cnn    # image Pong's CNN, as learner_scaling.py's pong-image runs it

Prints a Markdown table and writes benchmarks/results/allreduce_under_quota.json.
"""

from __future__ import annotations

import argparse
import os
import socket
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from benchmarks import common

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parent / "results" / "allreduce_under_quota.json"
#: CartPole's (256, 128) shared-trunk model of learner_scaling.py.
CARTPOLE_PARAMETERS = 34_563


def _rank(rank: int, world: int, port: int, group: str | None, args: dict[str, Any], out: Any) -> None:
    if group:
        Path(group, "cgroup.procs").write_text(f"{os.getpid()}\n")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    buffer = torch.ones(args["parameters"])
    spent, steps = [], []
    for step in range(args["warmup"] + args["steps"]):
        started, cpu = time.perf_counter(), time.thread_time()
        while time.thread_time() - cpu < args["compute_ms"] / 1e3:  # a minibatch's compute, in CPU time
            pass
        before = time.perf_counter()
        dist.all_reduce(buffer)
        done = time.perf_counter()
        if step >= args["warmup"]:
            spent.append(done - before)
            steps.append(done - started)
    dist.destroy_process_group()
    if rank == 0:
        out.put({"allreduce_ms": 1e3 * sum(spent) / len(spent), "step_ms": 1e3 * sum(steps) / len(steps)})


def measure(world: int, cpus: float | None, period_us: int | None, args: argparse.Namespace) -> dict[str, Any]:
    os.environ["TESTCLUSTER_CPU_PERIOD_US"] = str(period_us or 100_000)
    import importlib

    from benchmarks.scale import cpu_groups
    importlib.reload(cpu_groups)  # PERIOD_US is read from the environment at import
    groups = [cpu_groups.CpuGroup(f"allreduce{rank}", cpus) for rank in range(world)] if cpus else []
    for group in groups:
        group.create()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    context = mp.get_context("spawn")
    out = context.Queue()
    settings = {"compute_ms": args.compute_ms, "steps": args.steps, "warmup": args.warmup,
                "parameters": args.parameters}
    processes = [context.Process(target=_rank, args=(rank, world, port, str(groups[rank].path) if groups else None,
                                                     settings, out)) for rank in range(world)]
    try:
        for process in processes:
            process.start()
        result = out.get(timeout=600)
        for process in processes:
            process.join(60)
    finally:
        for group in groups:
            group.remove()
    return {"ranks": world, "parameters": args.parameters, "compute_ms": args.compute_ms, "cpus": cpus,
            "period_us": period_us if cpus else None, **result}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--cpus", type=float, default=0.175, help="each rank's quota in cores")
    parser.add_argument("--periods-us", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--parameters", type=int, default=CARTPOLE_PARAMETERS,
                        help="float32 values all-reduced per step (the model's parameters)")
    parser.add_argument("--compute-ms", type=float, default=3.0, help="busy work before each all-reduce")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--output", type=Path, default=RESULTS)
    common.add_common_args(parser)
    args = parser.parse_args(argv)
    rows = []
    for world in args.ranks:
        for cpus, period in [(None, None), *((args.cpus, period) for period in args.periods_us)]:
            rows.append(measure(world, cpus, period, args))
            print(f"  {rows[-1]}", flush=True)
    print("\n| ranks | quota (cores) | period ms | all-reduce ms (waiting included) | step ms |")
    print("|---:|---:|---:|---:|---:|")
    for row in rows:
        quota = f"{row['cpus']}" if row["cpus"] else "none"
        period = f"{row['period_us'] / 1e3:g}" if row["period_us"] else "-"
        print(f"| {row['ranks']} | {quota} | {period} | {row['allreduce_ms']:.2f} | {row['step_ms']:.2f} |")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    common.write_results(args.output, {
        "parameters": args.parameters, "compute_ms": args.compute_ms, "steps": args.steps,
        "rows": rows}, args.label)
    print(f"wrote {args.output}  (load average {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
