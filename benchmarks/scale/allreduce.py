"""What one gradient allreduce costs data-parallel learner ranks: gloo between real local processes,
and a ring allreduce's cost model for ranks on separate hosts.

Measured here: `torch.distributed` with gloo, every rank its own process (spawned), rendezvous on
127.0.0.1, each call a float32 `all_reduce` (sum) of one gradient's size. The sizes are the
parameter counts of the workloads' models, built from their configs as the learner builds them
(`configs/ppo_cartpole.yaml`; `configs/ppo_football_empty_goal_close.yaml`; `configs/ppo_pong_image.yaml`
with each CNN stack, `model.cnn_layers` table3 and nature), and 60,000 floats, a size measured on a
16-core machine before. One sample is one call's time at the slowest rank (barrier before it); the
table gives the median. 4 ranks on a 2-core machine are oversubscribed (two processes a core):
that row shows the cost of sharing cores as much as the collective's.

The model: a ring allreduce of `b` bytes over N ranks moves 2(N-1)/N * b per rank in 2(N-1) steps,
so t = 2(N-1)/N * b / bandwidth + 2(N-1) * latency. `bandwidth` and `latency` are fitted (least
squares on the relative error) on the calibration points: gloo between local processes on a
16-core machine, 60,000 floats 0.37 / 0.88 / 1.46 ms and 1.7M floats 2.9 / 4.6 / 6.0 ms at 2 / 4 / 8
ranks (that machine's measurements, not this one's); the fit is gloo's own software cost (copies,
sums, its TCP stack on loopback). Ranks on separate hosts pay the network on top, in series:
per byte 1/bandwidth + 1/network, per step latency + the network's one-way latency
(`--network-gbit`, default 10: gloo runs over TCP, so on a cluster with InfiniBand it gets IP over
the fabric or the nodes' Ethernet, of which 10 Gbit/s is the common floor; `--network-latency-us`,
default 25, kernel TCP across one switch). `ring_seconds` is what `scale_model.py` uses.

    python benchmarks/scale/allreduce.py [--ranks 2 4] [--calls 30] [--network-gbit 10] [--network-latency-us 25]

Prints a Markdown table and writes benchmarks/results/allreduce.json (`--output`).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import common

RESULTS = Path(__file__).resolve().parents[1] / "results"
#: gloo allreduce between local processes on a 16-core machine: (floats, ranks, milliseconds)
CALIBRATION_16_CORES = ((60_000, 2, 0.37), (60_000, 4, 0.88), (60_000, 8, 1.46),
                        (1_700_000, 2, 2.9), (1_700_000, 4, 4.6), (1_700_000, 8, 6.0))
FLOAT_BYTES = 4


# ---------------------------------------------------------------- the model
def fit_ring(points: tuple[tuple[int, int, float], ...] = CALIBRATION_16_CORES) -> dict[str, float]:
    """Bandwidth (bytes/s) and per-step latency (s) of t = 2(N-1)/N b / bw + 2(N-1) lat, least
    squares on the relative error (so that the small calls weigh as much as the large)."""
    seconds = np.asarray([ms / 1e3 for _, _, ms in points])
    design = np.asarray([[2 * (n - 1) / n * floats * FLOAT_BYTES, 2 * (n - 1)] for floats, n, _ in points], float)
    inverse_bandwidth, latency = np.linalg.lstsq(design / seconds[:, None], np.ones(len(points)), rcond=None)[0]
    return {"bytes_per_s": float(1 / inverse_bandwidth), "latency_s": float(latency)}


def ring_seconds(fit: dict[str, float], floats: int, ranks: int, network_gbit: float | None = None,
                 network_latency_s: float = 0.0) -> float:
    """One allreduce of `floats` float32 over `ranks` ranks by the fitted ring; with `network_gbit`,
    each rank on its own host behind a link of that rate (and that one-way latency), in series
    with gloo's own cost. 0 for one rank."""
    if ranks <= 1:
        return 0.0
    per_byte = 1 / fit["bytes_per_s"] + (8 / (network_gbit * 1e9) if network_gbit else 0.0)
    steps = 2 * (ranks - 1)
    return steps / ranks * floats * FLOAT_BYTES * per_byte + steps * (fit["latency_s"] + network_latency_s)


# ---------------------------------------------------------------- the workloads' gradient sizes
def gradient_sizes() -> dict[str, int]:
    """Trainable parameters of each workload's model, as its config's learner builds it."""
    import gymnasium as gym

    from benchmarks.scale.learner_ceiling import WORKLOADS, workload_config
    from lamarckian_hpc.runtime.algorithms import make_learner

    sizes = {}
    for name, workload in WORKLOADS.items():
        learner = make_learner(workload_config(workload, "ppo", 1, "cpu"), workload.observation_space,
                               gym.spaces.Discrete(workload.actions))
        sizes[name] = sum(p.numel() for group in learner.optimizer.param_groups for p in group["params"])
    return sizes


# ---------------------------------------------------------------- the measurement
def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _rank(rank: int, ranks: int, port: int, sizes: list[int], calls: int, warmup: int, queue: Any) -> None:
    os.environ.update({"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"})
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=ranks,
                            timeout=__import__("datetime").timedelta(seconds=60))
    try:
        result = {}
        for floats in sizes:
            tensor = torch.ones(floats)
            samples = torch.zeros(calls)
            for call in range(warmup + calls):
                tensor.fill_(1.0)
                dist.barrier()
                started = time.perf_counter()
                dist.all_reduce(tensor)
                if call >= warmup:
                    samples[call - warmup] = time.perf_counter() - started
            dist.all_reduce(samples, op=dist.ReduceOp.MAX)  # each call as long as its slowest rank
            if tensor[0].item() != ranks:
                raise RuntimeError(f"allreduce of {floats} floats summed to {tensor[0].item()}")
            result[floats] = samples.tolist()
        if rank == 0:
            queue.put(result)
    finally:
        dist.destroy_process_group()


def measure(ranks: int, sizes: list[int], calls: int, warmup: int) -> dict[int, list[float]]:
    """Seconds of each timed call (at the slowest rank) per size, `ranks` spawned processes."""
    import torch.multiprocessing as mp

    context = mp.get_context("spawn")
    queue = context.Queue()
    port = _free_port()
    processes = [context.Process(target=_rank, args=(r, ranks, port, sizes, calls, warmup, queue))
                 for r in range(ranks)]
    for process in processes:
        process.start()
    result = queue.get(timeout=300)
    for process in processes:
        process.join(timeout=60)
        if process.exitcode != 0:
            raise RuntimeError(f"allreduce rank exited with {process.exitcode}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", nargs="+", type=int, default=[2, 4])
    parser.add_argument("--calls", type=int, default=30, help="timed calls per size (after --warmup)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--network-gbit", type=float, default=10.0, help="cross-host link rate of the model")
    parser.add_argument("--network-latency-us", type=float, default=25.0, help="cross-host one-way latency")
    parser.add_argument("--output", type=Path, default=RESULTS / "allreduce.json")
    common.add_common_args(parser)
    args = parser.parse_args()
    sizes = gradient_sizes()
    named = {**sizes, "60k (16-core calibration size)": 60_000}
    load_before = os.getloadavg()
    measured = {ranks: measure(ranks, sorted(set(named.values())), args.calls, args.warmup) for ranks in args.ranks}
    load_after = os.getloadavg()
    fit = fit_ring()
    latency = args.network_latency_us * 1e-6
    cores = os.cpu_count() or 1
    rows = []
    for name, floats in named.items():
        for ranks in args.ranks:
            samples = measured[ranks][floats]
            rows.append({"gradient": name, "floats": floats, "ranks": ranks, "oversubscribed": ranks > cores,
                         "median_ms": statistics.median(samples) * 1e3,
                         "p90_ms": float(np.percentile(samples, 90)) * 1e3,
                         "model_local_ms": ring_seconds(fit, floats, ranks) * 1e3,
                         "model_cross_host_ms": ring_seconds(fit, floats, ranks, args.network_gbit, latency) * 1e3})
    print(f"ring fit on the 16-core machine's points: {fit['bytes_per_s'] / 1e9:.2f} GB/s, "
          f"{fit['latency_s'] * 1e6:.1f} us per step; cross-host: + {args.network_gbit:g} Gbit/s, "
          f"+ {args.network_latency_us:g} us per step")
    print(f"{cores} cores here, load average {load_before[0]:.2f} before, {load_after[0]:.2f} after\n")
    print("| gradient | floats | ranks | median ms (here) | p90 ms | model, local ms | model, cross-host ms |\n"
          "|---|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        over = " (oversubscribed)" if row["oversubscribed"] else ""
        print(f"| {row['gradient']} | {row['floats']:,} | {row['ranks']}{over} | {row['median_ms']:.2f} | "
              f"{row['p90_ms']:.2f} | {row['model_local_ms']:.2f} | {row['model_cross_host_ms']:.2f} |")
    calibration = [{"floats": f, "ranks": n, "measured_ms": ms, "model_ms": ring_seconds(fit, f, n) * 1e3}
                   for f, n, ms in CALIBRATION_16_CORES]
    print("\n| calibration (16-core machine) | ranks | measured ms | model ms |\n|---:|---:|---:|---:|")
    for point in calibration:
        print(f"| {point['floats']:,} | {point['ranks']} | {point['measured_ms']:.2f} | {point['model_ms']:.2f} |")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    common.write_results(args.output, {
        "cpus": cores, "load_average": load_before, "load_average_after": load_after, "calls": args.calls, "warmup": args.warmup,
        "gradient_floats": sizes, "rows": rows,
        "fit": {**fit, "source": "gloo between local processes on a 16-core machine", "points": calibration},
        "network": {"gbit": args.network_gbit, "latency_s": latency},
    }, args.label)
    print(f"written: {args.output}")


if __name__ == "__main__":
    main()
