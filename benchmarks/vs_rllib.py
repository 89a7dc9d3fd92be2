"""Our distributed PPO against RLlib's PPO, on the same machine, in the same run, alternating.

Both sides get the same work: two env-worker processes (ours: `runtime.num_actors=2`; RLlib:
`num_env_runners=2`), 8 environments per worker, a (256, 128) tanh trunk shared by policy and
value function, the same train batch, minibatch and epochs, the same PPO hyperparameters where
both have them (lr, gamma 0.99, lambda 0.95, clip 0.2, entropy 0.01, gradient norm 0.5, no KL
penalty, no value clip; RLlib's own defaults, lr 5e-5, lambda 1.0, clip 0.3, a KL penalty and a
value clip of 10, would compare the tuning rather than the systems), one torch thread in every
process, and the learner in the driver. Two differences remain: ours keeps its small critic
layers (128, 64) on top of the trunk where RLlib's value head is linear, and RLlib's value-loss
weight is 0.01, the value of its tuned CartPole example for a shared trunk (with 0.25, the weight
equal to ours, one run here had not reached 475 after 1.9M env steps). Ray gets the machine's
cores and a 100 MiB object store on both sides.

Each side runs in a subprocess of its own (`--side ours|rllib`), which starts its own Ray and
prints one JSON line, so that neither side's Ray state or memory leaks into the other; the parent
alternates the sides (and which goes first) over `--repeats` and prints the medians.

Figures per side:
- env steps/s sampled and trained, from the end of the first update (RLlib: iteration) to the end
  of the last: Ray and worker start-up and the first batch are left out. RLlib's trained steps are
  `num_module_steps_trained_lifetime` (its `num_env_steps_trained` counts a batch once per
  minibatch); it counts whole minibatches of every epoch, so a batch of 4096 env steps plus one
  bootstrap step per episode chunk counts as 9 x 512 = 4608, and its trained figure exceeds its
  sampled one. Ours count each step of every batch the learner updated on once.
- CPU utilization: CPU seconds of the side's whole process tree (driver, Ray's processes, workers)
  per wall second and core, over the same window; the machine's overall busy fraction beside it
  tells whether other work shared the cores.
- peak memory: the largest sum of PSS over the process tree, sampled every 0.25 s: each page
  shared between processes (torch's libraries, Ray's) counts once in all, split among them, so
  the figure is what the tree costs the machine. The largest sum of RSS, which counts a shared
  page once per process, is kept beside it in the JSON (`peak_rss_bytes`).
- the raw bound of the machine, measured in the same run after each pair of sides: `--workers`
  processes at once, each stepping `--num-envs` environments with one batched (256, 128) policy
  inference per tick and nothing else (`benchmarks/raw_bound.py`'s loop), their env steps/s summed;
  ours is shown as a fraction of it.
- time to the first update and, for CartPole, to a mean return of 475 over the last 20 episodes
  (RLlib: `env_runners/episode_return_mean` with a 20-episode window), from the start of the side's
  process, so imports and start-up count; "not reached" within `--max-seconds`. The env steps it
  took are shown beside it, to tell faster sampling from faster learning per step. A CartPole run
  ends at the target (or the budget); a Pendulum run ends after `--frames` env steps.

    python benchmarks/vs_rllib.py [--envs CartPole-v1 Pendulum-v1] [--repeats 1] [--max-seconds 300]

Needs RLlib: `pip install "ray[rllib]==2.60.0"` pins gymnasium 1.2.2 against our tested 1.4.0; with
gymnasium kept, its other extras suffice: `pip install --no-deps dm_tree absl-py lz4 ormsgpack
pyarrow tensorboardX "pandas<3" pytz tzdata`. Prints a Markdown table and writes
benchmarks/results/vs_rllib.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

SINGLE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
for variable, value in SINGLE_THREAD.items():
    os.environ[variable] = value

import psutil  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "vs_rllib.json"
SIDES = ("ours", "rllib")
OBJECT_STORE_BYTES = 100 * 1024 * 1024
CHILD_START_SLACK_SECONDS = 300
UNBOUNDED_FRAMES = 10**12
RAW = "raw"  # the raw bound's loop processes
RAW_WARMUP_FRAMES = 2_000
TARGETS = {"trained_ratio": 5.0, "cpu_utilization": 0.95, "target_time_ratio": 0.5, "pss_ratio": 0.45,
           "first_update_seconds": 5.0, "raw_bound_fraction": 0.7}


def machine_busy_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, every process included."""
    times = psutil.cpu_times()
    total = sum(times)
    return total - times.idle - getattr(times, "iowait", 0.0), total


class PeakMemory:
    """A thread that samples the sums of PSS and of RSS over this process and its descendants."""

    def __init__(self, interval_seconds: float = 0.25) -> None:
        self.interval_seconds = interval_seconds
        self.root = psutil.Process()
        self.peak_bytes = 0  # PSS
        self.peak_rss_bytes = 0
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name="peak-memory", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop_event.wait(self.interval_seconds):
            pss = rss = 0
            for process in [self.root, *self.root.children(recursive=True)]:
                try:
                    memory = process.memory_full_info()
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
                pss, rss = pss + memory.pss, rss + memory.rss
            self.peak_bytes, self.peak_rss_bytes = max(self.peak_bytes, pss), max(self.peak_rss_bytes, rss)

    def stop(self) -> tuple[int, int]:
        """(peak PSS, peak RSS) sums, in bytes."""
        self.stop_event.set()
        self.thread.join()
        return self.peak_bytes, self.peak_rss_bytes


class Progress:
    """What one side reports after each update, timed from the start of its process."""

    def __init__(self, target_return: float | None, max_seconds: float) -> None:
        from lamarckian_hpc.runtime.process_stats import TreeCpuMeter

        self.meter_type = TreeCpuMeter
        self.num_cores = os.cpu_count() or 1
        self.process_start = psutil.Process().create_time()
        self.target_return, self.max_seconds = target_return, max_seconds
        self.run_meter = TreeCpuMeter(self.num_cores)
        self.window_meter = None
        self.machine_start = (0.0, 0.0)
        self.first: tuple[float, float, float] | None = None
        self.last: tuple[float, float, float] = (0.0, 0.0, 0.0)
        self.updates = 0
        self.return_mean: float | None = None
        self.target_seconds: float | None = None
        self.target_frames: float | None = None
        self.figures: dict[str, float] = {}

    def seconds(self) -> float:
        return time.time() - self.process_start

    @property
    def out_of_time(self) -> bool:
        return self.seconds() > self.max_seconds

    @property
    def reached(self) -> bool:
        return self.target_seconds is not None

    def update(self, sampled: float, trained: float, return_mean: float | None) -> None:
        now = self.seconds()
        if self.first is None:
            self.first = (now, sampled, trained)
            self.window_meter = self.meter_type(self.num_cores)
            self.machine_start = machine_busy_seconds()
        self.last = (now, sampled, trained)
        self.updates += 1
        self.return_mean = return_mean
        if (self.target_return is not None and self.target_seconds is None and return_mean is not None
                and return_mean >= self.target_return):
            self.target_seconds, self.target_frames = now, sampled

    def finish(self) -> None:
        """Read the CPU meters; call right after the last update, before anything shuts down."""
        self.figures["run_cpu_utilization"] = self.run_meter.sample()
        if self.window_meter is not None and self.updates > 1:
            self.figures["cpu_utilization"] = self.window_meter.sample()
            busy, total = machine_busy_seconds()
            self.figures["machine_cpu_utilization"] = (busy - self.machine_start[0]) / max(
                total - self.machine_start[1], 1e-9)

    def summary(self) -> dict:
        if self.first is None:
            return {"updates": 0, "error": "no update within the budget", "seconds": self.seconds()}
        (first_seconds, first_sampled, first_trained), (last_seconds, sampled, trained) = self.first, self.last
        window = last_seconds - first_seconds
        steady = self.updates > 1 and window > 0
        return {
            "updates": self.updates, "env_steps_sampled": sampled, "env_steps_trained": trained,
            "seconds": last_seconds, "first_update_seconds": first_seconds,
            "sampled_steps_per_second": (sampled - first_sampled) / window if steady else None,
            "trained_steps_per_second": (trained - first_trained) / window if steady else None,
            "run_sampled_steps_per_second": sampled / last_seconds,
            "run_trained_steps_per_second": trained / last_seconds,
            "cpu_utilization": None, "machine_cpu_utilization": None, **self.figures,
            "return_mean": self.return_mean, "target_return": self.target_return,
            "target_seconds": self.target_seconds, "target_frames": self.target_frames,
        }


def run_ours(args: argparse.Namespace, progress: Progress) -> None:
    from lamarckian_hpc.config import RunConfig
    from lamarckian_hpc.runtime.ray_setup import ray_cpus, start_ray_while_importing

    config = RunConfig.model_validate({
        "seed": args.seed,
        "env": {"id": args.env, "num_envs": args.num_envs},
        "model": {"policy_hidden_sizes": [256, 128], "activation": "tanh", "share_trunk": True},
        "algorithm": {"batch_size": args.batch_size, "num_minibatches": args.batch_size // args.minibatch_size,
                      "num_epochs": args.epochs, "learning_rate": args.learning_rate},
        "runtime": {"mode": "ray", "sampling": args.sampling, "num_actors": args.workers, "device": "cpu",
                    "torch_threads": 1},
        "stop": {"total_env_steps": args.frames, "target_return": progress.target_return,
                 "return_window": 20, "max_wall_seconds": max(1.0, args.max_seconds - progress.seconds())},
    })

    start_ray_while_importing(None, ray_cpus(args.workers))  # as `lamarckian-hpc train` starts it
    from lamarckian_hpc.runtime.distributed import DistributedTrainer

    class Observer:
        def on_update_end(self, report) -> None:
            window_full = report.episodes >= config.stop.return_window
            progress.update(report.env_frames, report.trained_steps, report.recent_return_mean if window_full else None)

        def on_train_end(self, result) -> None:
            pass

    trainer = DistributedTrainer(config, [Observer()])
    try:
        trainer.train()
    finally:
        progress.finish()
        trainer.close()


def run_rllib(args: argparse.Namespace, progress: Progress) -> None:
    import ray
    import torch

    torch.set_num_threads(1)
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    ray.init(address="local", num_cpus=os.cpu_count() or 1, include_dashboard=False, logging_level=logging.WARNING,
             object_store_memory=OBJECT_STORE_BYTES)
    config = (
        PPOConfig()
        .environment(args.env)
        .env_runners(num_env_runners=args.workers, num_envs_per_env_runner=args.num_envs)
        .training(train_batch_size_per_learner=args.batch_size, minibatch_size=args.minibatch_size,
                  num_epochs=args.epochs, lr=args.learning_rate, gamma=0.99, lambda_=0.95, clip_param=0.2,
                  entropy_coeff=0.01, vf_loss_coeff=args.rllib_vf_loss_coeff, vf_clip_param=1e9, grad_clip=0.5,
                  use_kl_loss=False)
        .rl_module(model_config=DefaultModelConfig(fcnet_hiddens=[256, 128], fcnet_activation="tanh",
                                                   vf_share_layers=True))
        .reporting(metrics_num_episodes_for_smoothing=20)
        .debugging(seed=args.seed)
    )
    algo = config.build_algo()
    try:
        while True:
            result = algo.train()
            runners = result.get("env_runners", {})
            sampled = runners.get("num_env_steps_sampled_lifetime", 0)
            learners = result.get("learners", {}).get("__all_modules__", {})
            trained = learners.get("num_module_steps_trained_lifetime", 0)
            progress.update(sampled, trained, runners.get("episode_return_mean"))
            if progress.reached or sampled >= args.frames or progress.out_of_time:
                break
        progress.finish()
    finally:
        algo.stop()
        ray.shutdown()


def run_side(args: argparse.Namespace) -> None:
    """Child process: run one side, print one JSON line. Torch is the sides' own to import: ours
    imports it while its Ray starts, as `lamarckian-hpc train` does (one thread: `torch_threads`)."""
    memory = PeakMemory()
    target = args.target_return if args.env.startswith("CartPole") else None
    if target is not None:
        args.frames = UNBOUNDED_FRAMES  # a run with a return target goes on until it reaches it (or the budget)
    progress = Progress(target, args.max_seconds)
    (run_ours if args.side == "ours" else run_rllib)(args, progress)
    peak_pss, peak_rss = memory.stop()
    record = {"side": args.side, "env": args.env, **progress.summary(), "peak_pss_bytes": peak_pss,
              "peak_rss_bytes": peak_rss}
    print(json.dumps(record), flush=True)


def run_raw_loop(args: argparse.Namespace) -> None:
    """Child process: one process of the raw bound; prints its env steps/s as one JSON line."""
    import gymnasium as gym
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from raw_bound import RawLoop, run_config

    from lamarckian_hpc.runtime.learner import build_model

    torch.set_num_threads(1)
    config = run_config(args.env, args.num_envs, args.raw_frames)
    probe = gym.make(args.env)
    loop = RawLoop(config, build_model(config, probe.observation_space, probe.action_space))
    loop.run(RAW_WARMUP_FRAMES)
    seconds = loop.run(args.raw_frames)
    print(json.dumps({"side": RAW, "env": args.env, "steps_per_second": args.raw_frames / seconds}), flush=True)


def measure_raw_bound(args: argparse.Namespace, env_id: str) -> dict:
    """`--workers` raw loops at once, one per core; the bound is the sum of their env steps/s."""
    children = [subprocess.Popen(child_command(args, RAW, env_id), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, env={**os.environ, **SINGLE_THREAD}) for _ in range(args.workers)]
    rates = []
    for child in children:
        stdout, stderr = child.communicate(timeout=CHILD_START_SLACK_SECONDS)
        lines = [line for line in stdout.splitlines() if line.startswith("{")]
        if child.returncode != 0 or not lines:
            tail = "\n".join((stdout + stderr).splitlines()[-30:])
            print(f"raw bound on {env_id} failed (exit {child.returncode}):\n{tail}", file=sys.stderr)
            return {"side": RAW, "env": env_id, "error": f"exit {child.returncode}", "log_tail": tail}
        rates.append(json.loads(lines[-1])["steps_per_second"])
    return {"side": RAW, "env": env_id, "processes": len(rates), "per_process_steps_per_second": rates,
            "steps_per_second": sum(rates)}


def child_command(args: argparse.Namespace, side: str, env_id: str) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--side", side, "--env", env_id,
            "--raw-frames", str(args.raw_frames),
            "--workers", str(args.workers), "--num-envs", str(args.num_envs),
            "--batch-size", str(args.batch_size), "--minibatch-size", str(args.minibatch_size),
            "--epochs", str(args.epochs), "--learning-rate", str(args.learning_rate),
            "--frames", str(args.frames), "--max-seconds", str(args.max_seconds), "--seed", str(args.seed),
            "--sampling", args.sampling, "--target-return", str(args.target_return),
            "--rllib-vf-loss-coeff", str(args.rllib_vf_loss_coeff)]


def run_child(args: argparse.Namespace, side: str, env_id: str) -> dict:
    """Run one side in a process group of its own, so that a run past its time ends with its Ray."""
    started = time.monotonic()
    child = subprocess.Popen(child_command(args, side, env_id), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env={**os.environ, **SINGLE_THREAD}, start_new_session=True)
    try:
        stdout, stderr = child.communicate(timeout=args.max_seconds + CHILD_START_SLACK_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        return {"side": side, "env": env_id, "error": "timed out"}
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            record = json.loads(line)
            if record.get("side") == side:
                return {**record, "process_seconds": time.monotonic() - started}
    tail = "\n".join((stdout + stderr).splitlines()[-30:])
    print(f"{side} on {env_id} failed (exit {child.returncode}):\n{tail}", file=sys.stderr)
    return {"side": side, "env": env_id, "error": f"exit {child.returncode}", "log_tail": tail}


FIGURES = ("sampled_steps_per_second", "trained_steps_per_second", "cpu_utilization", "machine_cpu_utilization",
           "peak_pss_bytes", "peak_rss_bytes", "first_update_seconds", "target_seconds", "target_frames")


def median_of(records: list[dict], key: str) -> float | None:
    """Median over the runs; None when a run has no figure (for the target: did not reach it)."""
    values = [record.get(key) for record in records]
    return None if not values or None in values else statistics.median(values)


def summarize(runs: list[dict], env_id: str, max_seconds: float) -> dict:
    summary: dict = {"env": env_id}
    for side in SIDES:
        records = [run for run in runs if run["env"] == env_id and run["side"] == side and "error" not in run]
        summary[side] = {key: median_of(records, key) for key in FIGURES}
        targeted = [run["target_seconds"] is not None for run in records if run["target_return"] is not None]
        summary[side]["target_reached"] = f"{sum(targeted)}/{len(targeted)}" if targeted else None
        summary[side]["runs"] = len(records)
    ours, rllib = summary["ours"], summary["rllib"]
    summary["ratio"] = {key: ours[key] / rllib[key] if ours[key] is not None and rllib[key] else None
                        for key in FIGURES}
    raw = median_of([run for run in runs if run["env"] == env_id and run["side"] == RAW and "error" not in run],
                    "steps_per_second")
    summary["raw_bound"] = {"sampled_steps_per_second": raw}
    summary["ours_of_raw_bound"] = {key: ours[key] / raw if ours[key] is not None and raw else None
                                    for key in ("sampled_steps_per_second", "trained_steps_per_second")}
    if ours["target_seconds"] is not None and rllib["target_reached"] is not None and rllib["target_seconds"] is None:
        # RLlib's time to the target lies beyond the budget, so the ratio is below this bound.
        summary["ratio"]["target_seconds_below"] = ours["target_seconds"] / max_seconds
    return summary


def cell(value: float | None, form: str) -> str:
    return "–" if value is None else format(value, form)


def target_cell(figures: dict, is_ratio: bool) -> str:
    if figures["target_seconds"] is not None:
        steps = f"{figures['target_frames']:.2f}" if is_ratio else f"{figures['target_frames'] / 1e6:.2f}M"
        return f"{figures['target_seconds']:.{2 if is_ratio else 0}f} ({steps})"
    if is_ratio:
        return f"< {figures['target_seconds_below']:.2f}" if "target_seconds_below" in figures else "–"
    return f"not reached ({figures['target_reached']})"


def print_table(summaries: list[dict]) -> None:
    print("| env | side | env steps/s sampled | env steps/s trained | CPU utilization (tree) | CPU busy (machine) "
          "| peak PSS (GB) | first update (s) | time to 475 (s, env steps) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for summary in summaries:
        has_target = summary["ours"]["target_reached"] is not None or summary["rllib"]["target_reached"] is not None
        for name, figures, is_ratio in (("ours", summary["ours"], False), ("rllib", summary["rllib"], False),
                                        ("ours/RLlib", summary["ratio"], True)):
            memory = figures["peak_pss_bytes"]
            memory = memory if memory is None or is_ratio else memory / 1e9
            columns = [cell(figures["sampled_steps_per_second"], ".2f" if is_ratio else ",.0f"),
                       cell(figures["trained_steps_per_second"], ".2f" if is_ratio else ",.0f"),
                       cell(figures["cpu_utilization"], ".2f" if is_ratio else ".0%"),
                       cell(figures["machine_cpu_utilization"], ".2f" if is_ratio else ".0%"),
                       cell(memory, ".2f"), cell(figures["first_update_seconds"], ".2f" if is_ratio else ".1f"),
                       target_cell(figures, is_ratio) if has_target else "n/a"]
            print(f"| {summary['env']} | {name} | " + " | ".join(columns) + " |")
        raw, share = summary["raw_bound"]["sampled_steps_per_second"], summary["ours_of_raw_bound"]
        print(f"| {summary['env']} | raw bound (no learning) | {cell(raw, ',.0f')} | | | | | | |")
        print(f"| {summary['env']} | ours/raw bound | {cell(share['sampled_steps_per_second'], '.2f')} | "
              f"{cell(share['trained_steps_per_second'], '.2f')} | | | | | |")


def print_targets(summaries: list[dict]) -> None:
    print("\nProject targets (ours, measured above):")
    for summary in summaries:
        ratios, cpu, first = summary["ratio"], summary["ours"]["cpu_utilization"], summary["ours"]["first_update_seconds"]
        trained, limit = ratios["trained_steps_per_second"], TARGETS["target_time_ratio"]
        checks = [(f"trained env steps/s >= {TARGETS['trained_ratio']:.0f}x RLlib's", trained,
                   f"{cell(trained, '.2f')}x", trained is not None and trained >= TARGETS["trained_ratio"]),
                  (f"CPU utilization >= {TARGETS['cpu_utilization']:.0%}", cpu, cell(cpu, ".0%"),
                   cpu is not None and cpu >= TARGETS["cpu_utilization"]),
                  (f"peak PSS <= {TARGETS['pss_ratio']}x RLlib's", ratios["peak_pss_bytes"],
                   f"{cell(ratios['peak_pss_bytes'], '.2f')}x",
                   ratios["peak_pss_bytes"] is not None and ratios["peak_pss_bytes"] <= TARGETS["pss_ratio"]),
                  (f"first update <= {TARGETS['first_update_seconds']:.0f} s from process start", first,
                   f"{cell(first, '.1f')} s", first is not None and first <= TARGETS["first_update_seconds"]),
                  (f"env steps/s trained >= {TARGETS['raw_bound_fraction']:.0%} of the raw bound",
                   summary["ours_of_raw_bound"]["trained_steps_per_second"],
                   cell(summary["ours_of_raw_bound"]["trained_steps_per_second"], ".0%"),
                   (summary["ours_of_raw_bound"]["trained_steps_per_second"] or 0) >= TARGETS["raw_bound_fraction"])]
        if summary["ours"]["target_reached"] is not None:
            time_ratio, bound = ratios["target_seconds"], ratios.get("target_seconds_below")
            if time_ratio is None and bound is not None:
                checks.append((f"wall time to 475 <= {limit}x RLlib's", bound, f"RLlib not reached, < {bound:.2f}x",
                               bound <= limit))
            else:
                checks.append((f"wall time to 475 <= {limit}x RLlib's", time_ratio, f"{cell(time_ratio, '.2f')}x",
                               time_ratio is not None and time_ratio <= limit))
        for label, value, shown, met in checks:
            verdict = "no figure" if value is None else "met" if met else "not met"
            print(f"- {summary['env']}: {label}: {shown}, {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=["CartPole-v1", "Pendulum-v1"], help="Gymnasium ids")
    parser.add_argument("--repeats", type=int, default=1, help="alternating repetitions per env; medians shown")
    parser.add_argument("--workers", type=int, default=2, help="env-worker processes on each side")
    parser.add_argument("--num-envs", type=int, default=8, help="environments per worker")
    parser.add_argument("--batch-size", type=int, default=4096, help="env steps per train batch")
    parser.add_argument("--minibatch-size", type=int, default=512, help="steps per minibatch")
    parser.add_argument("--epochs", type=int, default=1, help="passes over each train batch")
    parser.add_argument("--learning-rate", type=float, default=3e-4, help="Adam step size on both sides")
    parser.add_argument("--frames", type=int, default=500_000, help="env steps per run without a return target")
    parser.add_argument("--max-seconds", type=float, default=300.0, help="wall budget per run, from process start")
    parser.add_argument("--target-return", type=float, default=475.0, help="CartPole mean return to time")
    parser.add_argument("--sampling", choices=("async", "sync"), default="async", help="our runtime.sampling")
    parser.add_argument("--rllib-vf-loss-coeff", type=float, default=0.01,
                        help="RLlib's value-loss weight; 0.25 would equal ours (0.5 x half the squared error)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--raw-frames", type=int, default=100_000,
                        help="env steps each process of the raw bound takes (0: do not measure the bound)")
    parser.add_argument("--side", choices=(*SIDES, RAW), help=argparse.SUPPRESS)
    parser.add_argument("--env", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.batch_size % args.minibatch_size:
        parser.error("--batch-size must be a multiple of --minibatch-size (ours splits a batch into equal parts)")
    if args.side == RAW:
        run_raw_loop(args)
        return
    if args.side is not None:
        run_side(args)
        return

    runs = []
    for repeat in range(args.repeats):
        for env_id in args.envs:
            order = SIDES if repeat % 2 == 0 else SIDES[::-1]
            for side in order:
                print(f"repeat {repeat + 1}/{args.repeats}: {side} on {env_id}", file=sys.stderr, flush=True)
                runs.append({"repeat": repeat, **run_child(args, side, env_id)})
            if args.raw_frames > 0:
                print(f"repeat {repeat + 1}/{args.repeats}: raw bound on {env_id}", file=sys.stderr, flush=True)
                runs.append({"repeat": repeat, **measure_raw_bound(args, env_id)})
    summaries = [summarize(runs, env_id, args.max_seconds) for env_id in args.envs]
    print(f"\n{args.workers} workers x {args.num_envs} envs, batch {args.batch_size}, minibatch "
          f"{args.minibatch_size}, {args.epochs} epoch(s), our sampling {args.sampling}; {os.cpu_count()} cores; "
          f"medians of {args.repeats} run(s) per side\n")
    print_table(summaries)
    print_targets(summaries)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    settings = {key: (str(value) if isinstance(value, Path) else value) for key, value in vars(args).items()
                if key not in ("side", "env")}
    args.output.write_text(json.dumps({
        "host": platform.node(), "cpus": os.cpu_count(), "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "settings": settings, "summaries": summaries, "runs": runs,
    }, indent=2))
    print(f"\nwritten: {args.output}")


if __name__ == "__main__":
    main()
