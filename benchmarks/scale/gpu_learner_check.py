"""The GPU learner's check, to run whenever a GPU machine is at hand: correctness of its GPU paths,
then the learner's ceiling on the GPU and on the CPU's threads.

No Ray and no actors (the script fails if anything imports Ray); the learners are fed synthetic
batches of each workload's shape and its config's own settings, as `learner_ceiling.py` does.
Three parts, in at most about 8 minutes on one H200 with 16 cores:

1. checks on the GPU: Adam's fused step against torch.optim.Adam(fused=True); the recorded
   (CUDA graph) PPO update against the eager one, weights within 1e-5, and a batch of NaN
   advantages skipped whole on the device with parameters and moments unchanged; CartPole's PPO
   and IMPALA learners with and without recorded steps, weights within 1e-4 after 3 updates;
2. moving image Pong's batch of 8,192 uint8 frames to the device: pageable, pinned whole, pinned
   in chunks (`rl.device.to_device`);
3. env steps trained per second for pong-nature, CartPole and Football, PPO and IMPALA, at their
   configs' settings: on the GPU with its paths added one at a time (`baseline`: pageable copies,
   host-checked steps, multi-tensor Adam, eager launches, what the learner did before; `+pinned`;
   `+fused`: fused Adam deciding on the device, nothing read back per minibatch; `+graphs`: the
   recorded minibatch step: every path, the GPU learner's default), on the CPU's threads, and
   pong-nature PPO with settings beyond its config's (cudnn.benchmark, NCHW frames, TF32 matrix
   products, a bfloat16 CNN).

    python benchmarks/scale/gpu_learner_check.py [--device cuda] [--updates 5] [--quick] [--budget-seconds 420]
                                           [--output benchmarks/results/gpu_learner_check.json]

`--device cpu --quick` runs the same code on the CPU with small batches (a dry run of the script).
Prints Markdown tables and writes the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from benchmarks import common
from benchmarks.scale.learner_ceiling import WORKLOADS, synthetic_experience, update_seconds, workload_config
from lamarckian_hpc.config import ModelConfig, PPOConfig
from lamarckian_hpc.models import ActorCritic, cnn
from lamarckian_hpc.rl import RolloutBatch, ppo_loss, ppo_update
from lamarckian_hpc.rl.adam import Adam
from lamarckian_hpc.rl.captured import CapturedSteps
from lamarckian_hpc.rl.device import choose_device, to_device
from lamarckian_hpc.runtime.algorithms import make_learner

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "gpu_learner_check.json"
#: (workload, algorithm) rows, in order of importance (the budget may cut the last).
ROWS = [("pong-nature", "ppo"), ("cartpole", "ppo"), ("football", "ppo"), ("cartpole", "impala"),
        ("football", "impala"), ("pong-nature", "impala")]
#: The GPU's paths, added one at a time: (name, pinned transfers, fused Adam deciding on the
#: device, recorded graphs). The last is what a GPU learner runs by default.
LADDER = [("baseline", False, False, False), ("+pinned", True, False, False), ("+fused", True, True, False),
          ("+graphs", True, True, True)]
DEFAULT = LADDER[-1][0]
#: pong-nature PPO only, each on top of the default: settings outside the config's own
#: ((module, attribute, value) to set, and the CNN's precision).
EXTRA: dict[str, tuple[list[tuple[object, str, object]], str | None]] = {
    "default, cudnn.benchmark": ([(torch.backends.cudnn, "benchmark", True)], None),
    "default, NCHW frames": ([(cnn, "GPU_MEMORY_FORMAT", torch.contiguous_format)], None),
    "default, TF32 matmuls": ([(torch.backends.cuda.matmul, "allow_tf32", True)], None),
    "default, bfloat16 CNN": ([], "bfloat16"),
}


def _small_model(device: torch.device, seed: int = 0) -> ActorCritic:
    torch.manual_seed(seed)
    env = gym.make("CartPole-v1")
    return ActorCritic(env.observation_space, env.action_space,
                       ModelConfig(policy_hidden_sizes=(64, 64), critic_hidden_sizes=())).to(device)


def _small_batch(model: ActorCritic, size: int, nan: bool = False) -> RolloutBatch:
    generator = torch.Generator().manual_seed(1)
    observations = torch.randn(size, 4, generator=generator)
    device = next(model.parameters()).device
    with torch.no_grad():
        actions, log_probs = model.act(observations.to(device))
    advantages = torch.full((size,), float("nan")) if nan else torch.randn(size, generator=generator)
    return RolloutBatch(observations.to(device), actions, log_probs, advantages.to(device),
                        (2.0 * observations[:, 0]).to(device))


def correctness(device: torch.device) -> dict:
    """Part 1: each check's result (True/False) and its numbers."""
    checks: dict = {}
    # Adam's fused step against torch's on this device.
    models, optimizers = [], []
    for make in (lambda p: torch.optim.Adam(p, lr=3e-3, eps=1e-5, fused=True), lambda p: Adam(p, lr=3e-3, eps=1e-5)):
        model = _small_model(device)
        optimizer = make(model.parameters())
        batch = _small_batch(model, 256)
        for _ in range(20):
            optimizer.zero_grad(set_to_none=True)
            ppo_loss(model, batch, PPOConfig())[0].backward()
            optimizer.step()
        models.append(model)
        optimizers.append(optimizer)
    difference = max(float((a - b).detach().abs().max()) for a, b in zip(models[0].parameters(), models[1].parameters()))
    checks["adam_fused_vs_torch_fused_max_abs"] = difference
    checks["adam_fused_vs_torch_fused_ok"] = difference <= 1e-5
    checks["adam_is_fused"] = bool(optimizers[1].fused)
    if device.type != "cuda":
        checks["graphs"] = "skipped: CUDA graphs need a GPU"
        return checks
    # The recorded update against the eager one.
    config = PPOConfig(batch_size=1024, num_minibatches=4, num_epochs=3)
    results = []
    for captured in (False, True):
        model = _small_model(device)
        optimizer = Adam(model.parameters(), lr=3e-3, eps=1e-5)
        batch, rng = _small_batch(model, 1024), np.random.default_rng(0)
        if captured:
            steps = CapturedSteps(model, optimizer)
            diagnostics = [ppo_update(model, optimizer, batch, config, rng, captured=steps) for _ in range(3)]
            checks["graph_recordings"] = steps.recordings
            before = [t.clone() for t in steps._state_tensors()]
            skipped = ppo_update(model, optimizer, _small_batch(model, 1024, nan=True), config, rng, captured=steps)
            after = steps._state_tensors()
            checks["graph_nan_batch_skipped_steps"] = skipped["nonfinite_steps"]
            checks["graph_nan_batch_state_unchanged"] = all(torch.equal(a, b) for a, b in zip(before, after))
        else:
            diagnostics = [ppo_update(model, optimizer, batch, config, rng) for _ in range(3)]
        results.append((model, diagnostics))
    (eager, eager_diag), (recorded, recorded_diag) = results
    difference = max(float((a - b).detach().abs().max()) for a, b in zip(eager.parameters(), recorded.parameters()))
    checks["graph_vs_eager_max_abs"] = difference
    checks["graph_vs_eager_ok"] = difference <= 1e-5
    checks["graph_vs_eager_loss_value"] = [eager_diag[-1]["loss_value"], recorded_diag[-1]["loss_value"]]
    checks["graph_ok"] = (checks["graph_vs_eager_ok"] and checks["graph_nan_batch_state_unchanged"]
                          and checks["graph_nan_batch_skipped_steps"] == 12)
    return checks


def transfers(device: torch.device, frames: int, repeats: int = 5) -> list[dict]:
    """Part 2: milliseconds to move `frames` uint8 4x84x84 frames to `device`, by each way."""
    array = np.random.default_rng(0).integers(0, 256, (frames, 4, 84, 84), dtype=np.uint8)
    ways = {"pageable": lambda: torch.from_numpy(array).to(device),
            "pinned whole": lambda: torch.from_numpy(array).pin_memory().to(device, non_blocking=True),
            "pinned chunks (to_device)": lambda: to_device(array, device)}
    if device.type != "cuda":  # pinned memory needs a GPU
        ways = {"pageable": ways["pageable"]}
    rows = []
    for name, move in ways.items():
        seconds = []
        for _ in range(repeats + 1):
            started = time.perf_counter()
            move()
            if device.type == "cuda":
                torch.cuda.synchronize()
            seconds.append(time.perf_counter() - started)
        median = statistics.median(seconds[1:])
        rows.append({"way": name, "bytes": array.nbytes, "ms": median * 1e3, "gb_per_s": array.nbytes / median / 1e9})
    return rows


def learner_row(workload: str, algorithm: str, device: str, threads: int, updates: int, variant: str,
                paths: tuple[bool, bool, bool], batch_size: int | None, precision: str | None = None) -> dict:
    """Part 3: one learner's update time with the GPU's paths `paths` (pinned, fused, graphs; the
    learner's defaults on a CPU)."""
    torch.set_num_threads(threads)
    spec = WORKLOADS[workload]
    config = workload_config(spec, algorithm, threads, device, batch_size, precision)
    learner = make_learner(config, spec.observation_space, gym.spaces.Discrete(spec.actions))
    if learner.device.type == "cuda":
        pinned, fused, graphs = paths
        learner.pinned_transfers = pinned
        learner.optimizer.fused = fused
        learner.captured_steps = graphs
    experience = synthetic_experience(spec.observation_space, spec.actions, config.algorithm.batch_size, 0)
    seconds = update_seconds(learner, experience, updates)
    median = statistics.median(seconds[1:])
    captured = learner._captured
    return {"workload": workload, "algorithm": algorithm, "device": learner.device.type, "threads": threads,
            "variant": variant, "batch": len(experience), "epochs": config.algorithm.num_epochs,
            "minibatches": config.algorithm.num_minibatches, "cnn_precision": precision,
            "warmup_seconds": seconds[0], "update_seconds": median,
            "spread_seconds": max(seconds[1:]) - min(seconds[1:]), "steps_per_second": len(experience) / median,
            "graph_recordings": captured.recordings if captured is not None else 0,
            "graph_unavailable": captured.unavailable if captured is not None else None}


def learner_checks(device: torch.device) -> dict:
    """The learners themselves with and without recorded steps (CartPole's PPO and IMPALA, 3
    updates): the largest parameter difference, and that the recorded ones were recorded once."""
    checks = {}
    for algorithm in ("ppo", "impala"):
        models = []
        for graphs in (False, True):
            spec = WORKLOADS["cartpole"]
            config = workload_config(spec, algorithm, 4, device.type)
            learner = make_learner(config, spec.observation_space, gym.spaces.Discrete(spec.actions))
            learner.captured_steps = graphs
            experience = synthetic_experience(spec.observation_space, spec.actions, config.algorithm.batch_size, 0)
            for index in range(3):
                learner.update(experience, env_frames=index * len(experience))
            models.append(learner.model)
            if graphs:
                checks[f"{algorithm}_learner_recordings"] = learner._captured.recordings if learner._captured else 0
        difference = max(float((a - b).detach().abs().max()) for a, b in zip(*(m.parameters() for m in models)))
        checks[f"{algorithm}_learner_graph_vs_eager_max_abs"] = difference
        checks[f"{algorithm}_learner_graph_vs_eager_ok"] = difference <= 1e-4
    return checks


def profile_update(workload: str, algorithm: str, threads: int, batch_size: int | None) -> dict:
    """Kernel launches and GPU-busy milliseconds of one update with every path on (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    torch.set_num_threads(threads)
    spec = WORKLOADS[workload]
    config = workload_config(spec, algorithm, threads, "cuda", batch_size)
    learner = make_learner(config, spec.observation_space, gym.spaces.Discrete(spec.actions))
    experience = synthetic_experience(spec.observation_space, spec.actions, config.algorithm.batch_size, 0)
    update_seconds(learner, experience, 1)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiler:
        started = time.perf_counter()
        learner.update(experience, env_frames=0)
        torch.cuda.synchronize()
        wall = time.perf_counter() - started
    events = profiler.events()
    kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    busy_us = sum(e.device_time for e in kernels)
    launches = sum(1 for e in events if e.name in ("cudaLaunchKernel", "cuLaunchKernel", "cudaGraphLaunch",
                                                     "cudaLaunchKernelExC", "cuLaunchKernelEx"))
    graph_launches = sum(1 for e in events if e.name == "cudaGraphLaunch")
    copies = [e for e in kernels if "Memcpy" in e.name or "memcpy" in e.name]
    return {"workload": workload, "algorithm": algorithm, "wall_ms": wall * 1e3, "gpu_busy_ms": busy_us / 1e3,
            "launches": launches, "graph_launches": graph_launches, "device_events": len(kernels),
            "copy_ms": sum(e.device_time for e in copies) / 1e3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--updates", type=int, default=5, help="timed updates per row (after one warm-up)")
    parser.add_argument("--cpu-threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--quick", action="store_true", help="small batches and few rows: a dry run of the script")
    parser.add_argument("--budget-seconds", type=float, default=420.0,
                        help="rows not started by then are left out (and listed as such)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    common.add_common_args(parser)
    args = parser.parse_args()
    started = time.monotonic()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no GPU: torch.cuda.is_available() is False (run with --device cpu for a dry run)")
    result: dict = {"torch": torch.__version__,
                    "gpu": torch.cuda.get_device_name(0) if device.type == "cuda" else None,
                    "quick": args.quick}

    def save() -> None:
        result["elapsed_seconds"] = time.monotonic() - started
        args.output.parent.mkdir(parents=True, exist_ok=True)
        common.write_results(args.output, result, args.label)

    result["checks"] = {}
    for part in (correctness, learner_checks):
        try:
            result["checks"].update(part(device))
        except Exception:  # the timing parts still run; the failure is in the JSON and the output
            result["checks"][f"{part.__name__}_error"] = traceback.format_exc()
    print("load average:", common.load_average(), "gpu:", result["gpu"], "torch:", torch.__version__, flush=True)
    print("checks:", json.dumps(result["checks"], default=str), flush=True)
    save()
    result["transfers"] = transfers(device, 512 if args.quick else 8192, 2 if args.quick else 5)
    print("\n| way | MB | ms | GB/s |\n|---|---:|---:|---:|")
    for row in result["transfers"]:
        print(f"| {row['way']} | {row['bytes'] / 1e6:.0f} | {row['ms']:.1f} | {row['gb_per_s']:.1f} |", flush=True)
    save()

    rows: list[dict] = []
    left_out: list[str] = []
    result["rows"], result["left_out"] = rows, left_out
    updates = 2 if args.quick else args.updates
    plan = ROWS[:3] if args.quick else ROWS
    print("\n| workload | algorithm | device | variant | threads | batch x epochs / minibatches | update (ms) | "
          "steps/s |\n|---|---|---|---|---:|---:|---:|---:|", flush=True)
    runs = []
    for workload, algorithm in plan:
        batch = 512 if args.quick and workload.startswith("pong") else None
        if device.type == "cuda":
            runs += [(workload, algorithm, "cuda", name, paths, [], None, batch) for name, *paths in LADDER]
        runs.append((workload, algorithm, "cpu", "cpu", (True, True, True), [], None, batch))
    if device.type == "cuda":  # last: settings outside the config's own, on top of the default
        default = tuple(LADDER[-1][1:])
        runs += [("pong-nature", "ppo", "cuda", name, default, settings, precision, None)
                 for name, (settings, precision) in EXTRA.items()]
    for workload, algorithm, run_device, variant, paths, settings, precision, batch in runs:
        if time.monotonic() - started > args.budget_seconds:
            left_out.append(f"{workload} {algorithm} {run_device} {variant}")
            continue
        saved = [(module, name, getattr(module, name)) for module, name, _ in settings]
        try:
            for module, name, value in settings:
                setattr(module, name, value)
            row = learner_row(workload, algorithm, run_device, args.cpu_threads, updates, variant, paths, batch,
                              precision)
        except Exception:
            row = {"workload": workload, "algorithm": algorithm, "device": run_device, "variant": variant,
                   "error": traceback.format_exc()}
            print(row["error"], flush=True)
            rows.append(row)
            continue
        finally:
            for module, name, value in saved:
                setattr(module, name, value)
        row["auto_device"] = choose_device("auto" if device.type == "cuda" else "cpu",
                                           "cnn" if workload.startswith("pong") else "mlp", algorithm)[0].type
        rows.append(row)
        print(f"| {workload} | {algorithm} | {row['device']} | {variant} | {args.cpu_threads} | {row['batch']:,} x "
              f"{row['epochs']} / {row['minibatches']} | {row['update_seconds'] * 1e3:.1f} | "
              f"{row['steps_per_second']:,.0f} |", flush=True)
        save()
    if device.type == "cuda" and time.monotonic() - started < args.budget_seconds + 30:
        try:
            result["profile"] = profile_update("pong-nature", "ppo", args.cpu_threads, None)
            print("\nprofile of one pong-nature PPO update, every path on:", json.dumps(result["profile"]), flush=True)
        except Exception:
            result["profile"] = {"error": traceback.format_exc()}
    # What the must-show asks: pong-nature PPO at its config's settings, and no MLP slower on cuda.
    summary: dict = {}
    best = {}
    for row in rows:
        if "error" in row:
            continue
        key = (row["workload"], row["algorithm"], row["device"])
        if row["device"] == "cpu" or row["variant"] == DEFAULT:
            best[key] = row["steps_per_second"]
    for (workload, algorithm, dev), value in sorted(best.items()):
        if dev == "cuda" and (workload, algorithm, "cpu") in best:
            summary[f"{workload} {algorithm}"] = {"cuda": value, "cpu": best[(workload, algorithm, "cpu")],
                                                  "cuda_over_cpu": value / best[(workload, algorithm, "cpu")]}
    result["summary"] = summary
    result["ray_imported"] = "ray" in sys.modules
    save()
    print("\n| workload | cuda steps/s (every path on) | cpu steps/s | cuda / cpu |\n|---|---:|---:|---:|")
    for name, entry in summary.items():
        print(f"| {name} | {entry['cuda']:,.0f} | {entry['cpu']:,.0f} | {entry['cuda_over_cpu']:.2f} |")
    if left_out:
        print("left out (budget):", ", ".join(left_out))
    print(f"ray imported: {result['ray_imported']}; elapsed {result['elapsed_seconds']:.0f} s; written: {args.output}")
    if result["ray_imported"]:
        raise SystemExit("Ray was imported on the check's path")


if __name__ == "__main__":
    main()
