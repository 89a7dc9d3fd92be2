"""PBT+PPO against Ray Tune's PopulationBasedTraining with RLlib's PPO, on the same machine, in one run.

Everything both sides do comes from one PBT config (`--config`, default
`configs/pbt_ppo_cartpole.yaml`; `configs/pbt_ppo_pong.yaml` is the paper's Figure 9 on vector
Pong): the environment and its settings, the model, the PPO settings, the population, the searched
hyperparameters with their intervals and initial intervals, the exploit interval, quantile,
resample probability and perturbation factors, the score window and the target.

Sides (`--sides`, each run in a subprocess of its own that prints one JSON line, one after another):

- `ours`: `lamarckian-hpc`'s PBT+PPO on the config, the members trained on `--workers` worker
  processes (the config's `runtime.mode`, processes forked from the side's own; `--mode ray` for
  Ray workers, `--mode serial` for one process).
- `independent`: the same population, same seed and initial hyperparameters, with exploit "none"
  (no copies, no explore), run until every member reached the target (or the cap): the
  baseline of the speedup figure, the median member's time to the target.
- `tune`: Ray Tune's `PopulationBasedTraining` over RLlib's PPO (new API stack): one trial per
  member, a perturbation every interval (in iterations of one train batch), values clipped to the
  intervals after a perturbation as ours are (a `custom_explore_fn`), the score RLlib's
  `episode_return_mean` over the same number of episodes.

Both learners sample their environments in the learner's own process (RLlib: `num_env_runners=0`)
with no KL penalty and no value clip; with the CartPole config, 8 environments, a batch of 256 env
steps in 10 epochs of 2 minibatches of 128, gamma 0.98, GAE lambda 0.8, separate (64, 64) tanh
policy and value networks. Every process runs one torch thread (OMP/MKL threads 1), and Ray's
workers run at normal priority on both sides (`RAY_worker_niceness=0`; Ray's default, nice 15,
starves them on a machine shared with other work). Each Tune trial asks for half a CPU
(`num_cpus_per_learner=0.5`, `num_cpus_for_main_process=0.5`) so that all four trials run at
once on two cores, as our four members do; Tune's PBT runs in its default asynchronous mode.
Times count from the start of the side's process (imports, starting Ray or the workers and
building the learners included); a side that has not reached the target by `--cap-seconds` is
stopped and reported as '>cap'.

    python benchmarks/peers/pbt_vs_tune.py [--config configs/pbt_ppo_pong.yaml] [--sides ours independent tune]
                                     [--seeds 0 1 2 3 4] [--cap-seconds 900] [--mode fork]

With several seeds each seed runs every side once, the sides alternating, and a last table gives
Tune's time over ours per seed with the median and the spread: one run's ratio swings with the
seed (the time the target is first reached depends on a few lucky members on both sides).

Prints Markdown tables and writes benchmarks/results/pbt_vs_tune.json (`--output`).
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Ray runs its workers at nice 15 by default; on a machine shared with other work that starves
# both sides' workers alike, so both run them at the normal priority.
SINGLE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                 "RAY_AUTH_MODE": "disabled", "RAY_worker_niceness": "0"}
os.environ.update(SINGLE_THREAD)

from benchmarks import common  # noqa: E402
from benchmarks.peers.side_by_side import process_seconds  # the time from process start both sides count  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "pbt_ppo_cartpole.yaml"
RESULTS = ROOT / "benchmarks" / "results" / "pbt_vs_tune.json"
SIDES = ("ours", "independent", "tune")
#: Our searched hyperparameters, by the names RLlib's PPO gives them.
TUNE_NAMES = {"learning_rate": "lr", "value_weight": "vf_loss_coeff", "entropy_weight": "entropy_coeff"}
ENV_NAME = "pbt-vs-tune-env"
OBJECT_STORE_BYTES = 200 * 1024 * 1024


def our_config(args: argparse.Namespace, overrides: list[str] | None = None):
    """`--config`: our side's settings, and the environment, PPO, population, search space, interval
    and target Tune's side is given."""
    from lamarckian_hpc.config import PBTConfig, load_config

    config = load_config(args.config, overrides or [], PBTConfig)
    if config.stop.target_return is None:
        raise SystemExit(f"{args.config}: stop.target_return is not set; both sides are timed to it")
    unknown = set(config.algorithm.hyperparameters) - set(TUNE_NAMES)
    if unknown:
        raise SystemExit(f"{args.config}: Tune's side cannot search {sorted(unknown)}; it searches {sorted(TUNE_NAMES)}")
    if config.model.critic_hidden_sizes and not config.model.share_trunk:
        raise SystemExit(f"{args.config}: RLlib's value network is the policy's layers, without critic_hidden_sizes")
    return config


def run_ours(args: argparse.Namespace, independent: bool) -> dict:
    from lamarckian_hpc.evorl import run_pbt
    from lamarckian_hpc.evorl.pbt_ppo import progress_line

    overrides = [f"seed={args.seed}", f"runtime.num_workers={args.workers}", f"stop.max_wall_seconds={args.cap_seconds}"]
    if args.mode is not None:
        overrides.append(f"runtime.mode={args.mode}")
    if independent:
        overrides += ["algorithm.exploit=none", "stop.until=all"]
    config = our_config(args, overrides)
    names = tuple(config.algorithm.hyperparameters)
    result = run_pbt(config, on_interval=lambda report: print(progress_line(report, names), file=sys.stderr))
    offset = result.started_at - (time.time() - process_seconds())  # process start -> training start
    reached = [None if t is None else t + offset for t in result.reached_seconds]
    return {"reached_seconds": reached, "reached_frames": result.reached_frames,
            "training_start_seconds": offset, "env_frames": result.env_frames, "best_return": result.best_return}


def run_tune(args: argparse.Namespace) -> dict:
    import ray
    from ray import tune
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.tune.schedulers import PopulationBasedTraining

    ray.init(address="local", num_cpus=os.cpu_count() or 1, include_dashboard=False, logging_level=logging.WARNING,
             object_store_memory=OBJECT_STORE_BYTES)
    ours = our_config(args)
    ppo, pbt, env = ours.ppo, ours.algorithm, ours.env
    target, population = ours.stop.target_return, pbt.population_size
    searched = {TUNE_NAMES[name]: spec for name, spec in pbt.hyperparameters.items()}

    def draw(spec, low: float, high: float):
        return tune.loguniform(low, high) if spec.log else tune.uniform(low, high)

    tune.register_env(ENV_NAME, functools.partial(make_env, env.id, env.max_episode_steps))  # our ids are registered by our package
    fixed = {"lr": ppo.learning_rate, "vf_loss_coeff": ppo.value_weight, "entropy_coeff": ppo.entropy_weight}
    fixed.update({name: draw(spec, spec.initial_low if spec.initial_low is not None else spec.low,
                             spec.initial_high if spec.initial_high is not None else spec.high)
                  for name, spec in searched.items()})
    config = (
        PPOConfig()
        .environment(ENV_NAME, env_config=dict(env.kwargs))
        .env_runners(num_env_runners=0, num_envs_per_env_runner=env.num_envs)
        .learners(num_learners=0, num_cpus_per_learner=0.5)
        .resources(num_cpus_for_main_process=0.5)
        .training(train_batch_size_per_learner=ppo.batch_size, minibatch_size=ppo.minibatch_size,
                  num_epochs=ppo.num_epochs, gamma=ppo.gamma, lambda_=ppo.gae_lambda, clip_param=ppo.clip_range,
                  grad_clip=ppo.max_grad_norm, use_kl_loss=False, vf_clip_param=1e9, **fixed)
        .rl_module(model_config=DefaultModelConfig(fcnet_hiddens=list(ours.model.policy_hidden_sizes),
                                                   fcnet_activation=ours.model.activation,
                                                   vf_share_layers=ours.model.share_trunk))
        .reporting(metrics_num_episodes_for_smoothing=ours.stop.return_window)
        .debugging(seed=args.seed)
    )

    def clip(new_config: dict) -> dict:
        for name, spec in searched.items():
            new_config[name] = min(max(new_config[name], spec.low), spec.high)
        return new_config

    scheduler = PopulationBasedTraining(
        time_attr="training_iteration", perturbation_interval=max(1, pbt.interval_env_frames // ppo.batch_size),
        quantile_fraction=pbt.truncation_fraction, resample_probability=pbt.resample_probability,
        perturbation_factors=tuple(sorted(pbt.perturb_factors, reverse=True)), custom_explore_fn=clip,
        hyperparam_mutations={name: draw(spec, spec.low, spec.high) for name, spec in searched.items()})
    metric = "env_runners/episode_return_mean"
    reached: dict[str, tuple[float, float]] = {}

    class Stop(tune.Stopper):
        def __call__(self, trial_id: str, result: dict) -> bool:
            value = result.get("env_runners", {}).get("episode_return_mean")
            if value is not None and value >= target and trial_id not in reached:
                reached[trial_id] = (process_seconds(),
                                     result.get("env_runners", {}).get("num_env_steps_sampled_lifetime", 0))
            return False

        def stop_all(self) -> bool:
            return bool(reached) or process_seconds() > args.cap_seconds

    storage = tempfile.mkdtemp(prefix="pbt_vs_tune_")
    start = process_seconds()
    tuner = tune.Tuner("PPO", param_space=config,
                       tune_config=tune.TuneConfig(metric=metric, mode="max", scheduler=scheduler,
                                                   num_samples=population),
                       run_config=tune.RunConfig(stop=Stop(), storage_path=storage, verbose=0))
    grid = tuner.fit()
    best = max((r.metrics.get("env_runners", {}).get("episode_return_mean") or float("-inf")) for r in grid)
    ray.shutdown()
    first = min(reached.values(), default=None)
    return {"reached_seconds": [first[0]] if first else [None], "reached_frames": [first[1]] if first else [None],
            "training_start_seconds": start, "best_return": best}


def make_env(env_id: str, max_episode_steps: int | None, env_config: dict):
    """The environment of our config in an RLlib env runner: our ids need our package imported."""
    import gymnasium as gym

    import lamarckian_hpc.envs  # noqa: F401 - registers lamarckian/* ids

    return gym.make(env_id, max_episode_steps=max_episode_steps, **dict(env_config))


def run_side(args: argparse.Namespace) -> None:
    record = run_tune(args) if args.side == "tune" else run_ours(args, args.side == "independent")
    print(json.dumps({"side": args.side, **record}), flush=True)


def run_child(args: argparse.Namespace, side: str) -> dict:
    command = [sys.executable, str(Path(__file__).resolve()), "--side", side, "--seed", str(args.seed),
               "--workers", str(args.workers), "--cap-seconds", str(args.cap_seconds), "--config", str(args.config)]
    if args.mode is not None:
        command += ["--mode", args.mode]
    started = time.monotonic()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, **SINGLE_THREAD}, start_new_session=True)
    try:
        stdout, stderr = child.communicate(timeout=args.cap_seconds + 300)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        return {"side": side, "error": "timed out", "reached_seconds": [None]}
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            return {**json.loads(line), "process_seconds": time.monotonic() - started,
                    "log_tail": stderr.splitlines()[-8:]}
    tail = "\n".join((stdout + stderr).splitlines()[-30:])
    print(f"{side} failed (exit {child.returncode}):\n{tail}", file=sys.stderr)
    return {"side": side, "error": f"exit {child.returncode}", "reached_seconds": [None], "log_tail": tail}


def first(record: dict) -> float | None:
    times = [t for t in record.get("reached_seconds", []) if t is not None]
    return min(times) if times else None


def median(record: dict) -> float | None:
    """Median member's time to the target; None when half or more never reached it."""
    times = sorted(float("inf") if t is None else t for t in record.get("reached_seconds", []))
    if not times:
        return None
    middle = (times[(len(times) - 1) // 2] + times[len(times) // 2]) / 2
    return None if middle == float("inf") else middle


def shown(value: float | None, cap: float) -> str:
    return f">{cap:.0f}" if value is None else f"{value:.1f}"


def seed_table(args: argparse.Namespace, records: dict[int, dict[str, dict]], target: float) -> dict:
    """One row per seed (each side's time to the target, ours split into start-up and training), then
    the median ratio and its spread over the seeds."""
    cap = args.cap_seconds
    print(f"| seed | ours: start-up (s) | ours: best member reaches {target:g} (s) | Tune reaches it (s) | Tune / ours |")
    print("|---:|---:|---:|---:|---:|")
    ratios = []
    for seed, sides in records.items():
        ours, tune = sides.get("ours", {}), sides.get("tune", {})
        ratio = None
        if first(ours) is not None and "tune" in sides:
            ratio = (first(tune) or cap) / first(ours)
            ratios.append(ratio)
        start_up = ours.get("training_start_seconds")
        print(f"| {seed} | {'–' if start_up is None else f'{start_up:.1f}'} | {shown(first(ours), cap)} | "
              f"{shown(first(tune), cap) if 'tune' in sides else '–'} | "
              f"{'–' if ratio is None else f'{ratio:.2f}x' + ('' if first(tune) is not None else ' (at least)')} |")
    if not ratios:
        return {}
    summary = {"ratios": ratios, "median_ratio": statistics.median(ratios), "min_ratio": min(ratios),
               "max_ratio": max(ratios)}
    print(f"\nours vs Ray Tune PBT + RLlib PPO over seeds {list(records)}: median {summary['median_ratio']:.2f}x "
          f"(from {summary['min_ratio']:.2f}x to {summary['max_ratio']:.2f}x); goal: a median of at least 8x")
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    parser.add_argument("--workers", type=int, default=2, help="our worker processes sharing the members")
    parser.add_argument("--mode", choices=("ray", "fork", "serial"),
                        help="where our members train (runtime.mode); default: the config's")
    parser.add_argument("--cap-seconds", type=float, default=900.0, help="a side is stopped after this")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0],
                        help="the seeds to run, each side once per seed, the sides alternating; with several, "
                             "the median ratio and its spread")
    parser.add_argument("--seed", type=int, help=argparse.SUPPRESS)  # a child side's seed
    parser.add_argument("--config", type=Path, default=CONFIG,
                        help="our PBT config; Tune's side gets its environment, PPO, search space and target")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)
    common.add_common_args(parser)
    args = parser.parse_args()
    if args.side is not None:
        run_side(args)
        return
    records: dict[int, dict[str, dict]] = {}
    for seed in args.seeds:
        args.seed = seed
        records[seed] = {}
        for side in args.sides:
            print(f"seed {seed}: running {side}", file=sys.stderr, flush=True)
            records[seed][side] = run_child(args, side)
            print(json.dumps({k: v for k, v in records[seed][side].items() if k != "log_tail"}), file=sys.stderr,
                  flush=True)
    cap = args.cap_seconds
    ours = our_config(args)
    ppo, target, population = ours.ppo, ours.stop.target_return, ours.algorithm.population_size
    print(f"\n{ours.env.id}, population {population}, target mean return {target:g} (last "
          f"{ours.stop.return_window} episodes); {os.cpu_count()} cores; seconds from process start\n")
    for seed, sides in records.items():
        print(f"seed {seed}\n")
        print(f"| side | best member reaches {target:g} (s) | median member reaches {target:g} (s) | members that reached it |")
        print("|---|---:|---:|---:|")
        for side, record in sides.items():
            reached = sum(t is not None for t in record.get("reached_seconds", []))
            count = population if side != "tune" else "–"
            median_cell = shown(median(record), cap) if side != "tune" else "–"
            print(f"| {side} | {shown(first(record), cap)} | {median_cell} | "
                  f"{reached if side != 'tune' else ('1+' if reached else 0)}/{count} |")
        if "independent" in sides and first(sides.get("ours", {})) is not None:
            baseline = median(sides["independent"])
            verdict = "met" if baseline is None or first(sides["ours"]) < baseline else "not met"
            print(f"\nPBT best member {first(sides['ours']):.1f} s vs median independent member "
                  f"{shown(baseline, cap)} s: {verdict}")
        print()
    summary = seed_table(args, records, target) if "ours" in args.sides and "tune" in args.sides else {}
    if summary:  # the headline figure: the median over the seeds (one seed's ratio when there is one)
        summary["tune_over_ours_at_least"] = summary["median_ratio"]
        summary["tune_over_ours"] = (summary["median_ratio"] if all(first(sides["tune"]) is not None
                                                                    for sides in records.values()) else None)
    first_seed = records[args.seeds[0]]
    if len(records) == 1 and "independent" in first_seed and first(first_seed.get("ours", {})) is not None:
        baseline = median(first_seed["independent"])
        summary["independent_median_over_pbt_best"] = None if baseline is None else baseline / first(first_seed["ours"])
    args.output.parent.mkdir(parents=True, exist_ok=True)
    common.write_results(args.output, {
        "settings": {"config": str(args.config), "env": ours.env.id, "target_return": target,
                     "workers": args.workers, "mode": args.mode, "cap_seconds": cap, "seeds": args.seeds,
                     "population": population, "batch": ppo.batch_size, "minibatch": ppo.minibatch_size, "epochs": ppo.num_epochs,
                     "interval_frames": ours.algorithm.interval_env_frames},
        # `records` holds one seed's sides, as a run with one seed always wrote; `by_seed` every seed's
        "summary": summary, **({"records": first_seed} if len(records) == 1 else {}),
        "by_seed": {str(seed): sides for seed, sides in records.items()},
    }, args.label)
    print(f"\nwritten: {args.output}")


if __name__ == "__main__":
    main()
