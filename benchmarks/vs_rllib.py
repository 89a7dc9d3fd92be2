"""Our distributed PPO against RLlib's PPO, on the same machine, in the same run, alternating.

Both sides get the same work: two env-worker processes (ours: `runtime.num_actors=2`; RLlib:
`num_env_runners=2`), 8 environments per worker, a (256, 128) tanh trunk shared by policy and
value function, the same train batch, minibatch and epochs, the same PPO hyperparameters (RLlib's
defaults differ: lr 5e-5, lambda 1.0, clip 0.3, no entropy bonus, a KL penalty and a value clip
of 10, which would compare the tuning rather than the systems), one torch thread in every process
and the learner in the driver. Ours keeps its small critic layers (128, 64) on top of the trunk;
RLlib's value head is linear. Ray gets the machine's cores and a 100 MiB object store on both sides.

Each side runs in a subprocess of its own (`--side ours|rllib`), which starts its own Ray and
prints one JSON line, so that neither side's Ray state or memory leaks into the other; the parent
alternates the sides (and which goes first) over `--repeats` and prints the medians.

Figures per side:
- env steps/s sampled and trained, from the end of the first update (RLlib: iteration) to the end
  of the last: Ray and worker start-up and the first batch are left out. RLlib's trained steps are
  `num_module_steps_trained_lifetime` (its `num_env_steps_trained` counts a batch once per
  minibatch); ours are the steps of every batch the learner updated on.
- CPU utilization: CPU seconds of the side's whole process tree (driver, Ray's processes, workers)
  per wall second and core, over the same window; the machine's overall busy fraction beside it
  tells whether other work shared the cores.
- peak memory: the largest sum of RSS over the process tree, sampled every 0.25 s (pages shared
  between processes, such as torch's libraries, count once per process on both sides).
- time to the first update and, for CartPole, to a mean return of 475 over the last 20 episodes
  (RLlib: `env_runners/episode_return_mean` with a 20-episode window), from the start of the side's
  process, so imports and start-up count; "not reached" within `--max-seconds`.

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
TARGETS = {"trained_ratio": 3.0, "cpu_utilization": 0.95, "target_time_ratio": 0.5}


def machine_busy_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, every process included."""
    times = psutil.cpu_times()
    total = sum(times)
    return total - times.idle - getattr(times, "iowait", 0.0), total


class PeakMemory:
    """A thread that samples the sum of RSS over this process and its descendants."""

    def __init__(self, interval_seconds: float = 0.25) -> None:
        self.interval_seconds = interval_seconds
        self.root = psutil.Process()
        self.peak_bytes = 0
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name="peak-memory", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop_event.wait(self.interval_seconds):
            total = 0
            for process in [self.root, *self.root.children(recursive=True)]:
                try:
                    total += process.memory_info().rss
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
            self.peak_bytes = max(self.peak_bytes, total)

    def stop(self) -> int:
        self.stop_event.set()
        self.thread.join()
        return self.peak_bytes


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
            self.target_seconds = now

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
            "target_seconds": self.target_seconds,
        }


def frame_budget(args: argparse.Namespace, progress: Progress) -> int:
    """A run with a return target goes on until it reaches it (or runs out of time)."""
    return args.frames if progress.target_return is None else UNBOUNDED_FRAMES


class BudgetSpent(Exception):
    """Raised by the observer to end our trainer's run at --max-seconds."""


def run_ours(args: argparse.Namespace, progress: Progress) -> None:
    from lamarckian_hpc.config import RunConfig
    from lamarckian_hpc.runtime.distributed import DistributedTrainer

    config = RunConfig.model_validate({
        "seed": args.seed,
        "env": {"id": args.env, "num_envs": args.num_envs},
        "model": {"policy_hidden_sizes": [256, 128], "activation": "tanh", "share_trunk": True},
        "algorithm": {"batch_size": args.batch_size, "num_minibatches": args.batch_size // args.minibatch_size,
                      "num_epochs": args.epochs, "learning_rate": args.learning_rate},
        "runtime": {"mode": "ray", "sampling": args.sampling, "num_actors": args.workers, "device": "cpu",
                    "torch_threads": 1},
        "stop": {"total_env_steps": frame_budget(args, progress), "target_return": progress.target_return, "return_window": 20},
    })

    class Observer:
        trained = 0

        def on_update_end(self, report) -> None:
            # Every step of a batch is counted once in the staleness histogram.
            self.trained += sum(value for name, value in report.metrics.items()
                                if name.startswith("staleness_count_"))
            window_full = report.episodes >= config.stop.return_window
            progress.update(report.env_frames, self.trained, report.recent_return_mean if window_full else None)
            if progress.out_of_time:
                raise BudgetSpent

        def on_train_end(self, result) -> None:
            pass

    trainer = DistributedTrainer(config, [Observer()])
    try:
        trainer.train()
    except BudgetSpent:
        pass
    finally:
        progress.finish()
        trainer.close()


def run_rllib(args: argparse.Namespace, progress: Progress) -> None:
    import ray
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False, logging_level=logging.WARNING,
             object_store_memory=OBJECT_STORE_BYTES)
    config = (
        PPOConfig()
        .environment(args.env)
        .env_runners(num_env_runners=args.workers, num_envs_per_env_runner=args.num_envs)
        .training(train_batch_size_per_learner=args.batch_size, minibatch_size=args.minibatch_size,
                  num_epochs=args.epochs, lr=args.learning_rate, gamma=0.99, lambda_=0.95, clip_param=0.2,
                  entropy_coeff=0.01, vf_loss_coeff=0.25, vf_clip_param=1e9, grad_clip=0.5, use_kl_loss=False)
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
            trained = result.get("learners", {}).get("__all_modules__", {}).get("num_module_steps_trained_lifetime", 0)
            progress.update(sampled, trained, runners.get("episode_return_mean"))
            if progress.reached or sampled >= frame_budget(args, progress) or progress.out_of_time:
                break
        progress.finish()
    finally:
        algo.stop()
        ray.shutdown()


def run_side(args: argparse.Namespace) -> None:
    """Child process: run one side, print one JSON line."""
    import torch

    torch.set_num_threads(1)
    memory = PeakMemory()
    target = args.target_return if args.env.startswith("CartPole") else None
    progress = Progress(target, args.max_seconds)
    (run_ours if args.side == "ours" else run_rllib)(args, progress)
    record = {"side": args.side, "env": args.env, **progress.summary(), "peak_memory_bytes": memory.stop()}
    print(json.dumps(record), flush=True)


def child_command(args: argparse.Namespace, side: str, env_id: str) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--side", side, "--env", env_id,
            "--workers", str(args.workers), "--num-envs", str(args.num_envs),
            "--batch-size", str(args.batch_size), "--minibatch-size", str(args.minibatch_size),
            "--epochs", str(args.epochs), "--learning-rate", str(args.learning_rate),
            "--frames", str(args.frames), "--max-seconds", str(args.max_seconds), "--seed", str(args.seed),
            "--sampling", args.sampling, "--target-return", str(args.target_return)]


def run_child(args: argparse.Namespace, side: str, env_id: str) -> dict:
    started = time.monotonic()
    try:
        completed = subprocess.run(child_command(args, side, env_id), capture_output=True, text=True,
                                   env={**os.environ, **SINGLE_THREAD},
                                   timeout=args.max_seconds + CHILD_START_SLACK_SECONDS)
    except subprocess.TimeoutExpired:
        return {"side": side, "env": env_id, "error": "timed out"}
    for line in reversed(completed.stdout.splitlines()):
        if line.startswith("{"):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if record.get("side") == side:
                return {**record, "process_seconds": time.monotonic() - started}
    tail = "\n".join((completed.stdout + completed.stderr).splitlines()[-30:])
    print(f"{side} on {env_id} failed (exit {completed.returncode}):\n{tail}", file=sys.stderr)
    return {"side": side, "env": env_id, "error": f"exit {completed.returncode}", "log_tail": tail}


def median_of(records: list[dict], key: str) -> float | None:
    values = [record[key] for record in records if record.get(key) is not None]
    return statistics.median(values) if values else None


def ratio(ours: float | None, rllib: float | None) -> float | None:
    return ours / rllib if ours is not None and rllib else None


def summarize(runs: list[dict], env_id: str, max_seconds: float) -> dict:
    keys = ("sampled_steps_per_second", "trained_steps_per_second", "cpu_utilization", "machine_cpu_utilization",
            "peak_memory_bytes", "first_update_seconds")
    summary: dict = {"env": env_id}
    for side in SIDES:
        records = [run for run in runs if run["env"] == env_id and run["side"] == side and "error" not in run]
        figures = {key: median_of(records, key) for key in keys}
        reached = [run["target_seconds"] for run in records if run.get("target_return") is not None]
        figures["target_seconds"] = (statistics.median(reached) if reached and None not in reached else None)
        figures["target_reached"] = f"{sum(time is not None for time in reached)}/{len(reached)}" if reached else None
        figures["runs"] = len(records)
        summary[side] = figures
    summary["ratio"] = {key: ratio(summary["ours"][key], summary["rllib"][key])
                        for key in (*keys, "target_seconds")}
    ours_seconds, rllib = summary["ours"]["target_seconds"], summary["rllib"]
    if ours_seconds is not None and rllib["target_reached"] is not None and rllib["target_seconds"] is None:
        # RLlib's time to the target is beyond the budget, so the ratio is below this bound.
        summary["ratio"]["target_seconds_below"] = ours_seconds / max_seconds
    return summary


def cell(value: float | None, form: str) -> str:
    return "–" if value is None else format(value, form)


def print_table(summaries: list[dict]) -> None:
    print("| env | side | env steps/s sampled | env steps/s trained | CPU utilization (tree) | CPU busy (machine) "
          "| peak memory (GB) | first update (s) | time to 475 (s) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for summary in summaries:
        cartpole = summary["ours"]["target_reached"] is not None or summary["rllib"]["target_reached"] is not None
        for side in SIDES:
            figures = summary[side]
            target = "n/a" if not cartpole else (
                cell(figures["target_seconds"], ".0f") if figures["target_seconds"] is not None else
                f"not reached ({figures['target_reached']})")
            memory = None if figures["peak_memory_bytes"] is None else figures["peak_memory_bytes"] / 1e9
            print(f"| {summary['env']} | {side} | {cell(figures['sampled_steps_per_second'], ',.0f')} | "
                  f"{cell(figures['trained_steps_per_second'], ',.0f')} | {cell(figures['cpu_utilization'], '.0%')} | "
                  f"{cell(figures['machine_cpu_utilization'], '.0%')} | {cell(memory, '.2f')} | "
                  f"{cell(figures['first_update_seconds'], '.1f')} | {target} |")
        ratios = summary["ratio"]
        target = "n/a" if not cartpole else (
            cell(ratios["target_seconds"], ".2f") if ratios["target_seconds"] is not None else
            f"< {ratios['target_seconds_below']:.2f}" if "target_seconds_below" in ratios else "–")
        print(f"| {summary['env']} | ours/RLlib | {cell(ratios['sampled_steps_per_second'], '.2f')} | "
              f"{cell(ratios['trained_steps_per_second'], '.2f')} | {cell(ratios['cpu_utilization'], '.2f')} | "
              f"{cell(ratios['machine_cpu_utilization'], '.2f')} | {cell(ratios['peak_memory_bytes'], '.2f')} | "
              f"{cell(ratios['first_update_seconds'], '.2f')} | {target} |")


def print_targets(summaries: list[dict]) -> None:
    def verdict(value: float | None, met: bool) -> str:
        return "no figure" if value is None else ("met" if met else "not met")

    print("\nProject targets (ours, measured above):")
    for summary in summaries:
        trained = summary["ratio"]["trained_steps_per_second"]
        cpu = summary["ours"]["cpu_utilization"]
        print(f"- {summary['env']}: trained env steps/s >= {TARGETS['trained_ratio']:.0f}x RLlib's: "
              f"{cell(trained, '.2f')}x, {verdict(trained, trained is not None and trained >= TARGETS['trained_ratio'])}; "
              f"CPU utilization >= {TARGETS['cpu_utilization']:.0%}: {cell(cpu, '.0%')}, "
              f"{verdict(cpu, cpu is not None and cpu >= TARGETS['cpu_utilization'])}")
        if summary["ours"]["target_reached"] is not None:
            time_ratio = summary["ratio"]["target_seconds"]
            below = summary["ratio"].get("target_seconds_below")
            if time_ratio is not None:
                text = f"{time_ratio:.2f}x, {verdict(time_ratio, time_ratio <= TARGETS['target_time_ratio'])}"
            elif below is not None:
                text = (f"RLlib not reached; ours/budget {below:.2f}x, "
                        f"{'met' if below <= TARGETS['target_time_ratio'] else 'undecided'}")
            else:
                text = "ours not reached" if summary["ours"]["target_seconds"] is None else "no figure"
            print(f"- {summary['env']}: wall time to 475 <= {TARGETS['target_time_ratio']}x RLlib's: {text}")


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
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--env", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.batch_size % args.minibatch_size:
        parser.error("--batch-size must be a multiple of --minibatch-size (ours splits a batch into equal minibatches)")
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
