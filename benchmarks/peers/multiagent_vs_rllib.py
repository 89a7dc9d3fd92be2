"""Our multi-agent PPO against RLlib's on MPE simple_spread, on the same machine, in the same run.

The environment is the same PettingZoo parallel environment on both sides: mpe2's simple_spread_v3
with 3 agents and 3 landmarks, discrete actions, 25-step episodes, `local_ratio` 0.5 (ours: env id
`pettingzoo:mpe2.simple_spread_v3`; RLlib: the same `parallel_env` in
`ray.rllib.env.wrappers.pettingzoo_env.ParallelPettingZooEnv`, registered with
`tune.register_env`). Two settings of policies and mapping, the same on both sides:
- `shared`: one policy for all agents (parameter sharing);
- `per_agent`: one policy per agent, agent_i -> agent_i.

Equal on both sides: two env-worker processes (ours: `runtime.num_actors=2`; RLlib:
`num_env_runners=2`) of 8 environments each; the learner in the driver process (RLlib:
`num_learners=0`, its default); per policy a (64, 64) tanh policy network and a separate (64, 64)
tanh value network with a linear output (ours: `share_trunk=false` and no critic layers of its
own; RLlib: `vf_share_layers=False`), each agent's critic reading only that agent's observation
(no centralised critic: RLlib's default model has none, and ours is switched off); batches of
`--batch-size` agent steps per policy (RLlib: `count_steps_by="agent_steps"` and a train batch of
`--batch-size` x policies agent steps, which gives every module `--batch-size` of them),
minibatches of `--minibatch-size` agent steps, `--epochs` passes, Adam with the same learning
rate, gamma 0.99, lambda 0.95, clip 0.2, entropy 0.01, global gradient norm 0.5, no KL penalty, no
value clip, and a value-loss weight equal to ours (RLlib's 0.25 x the squared error is our 0.5 x
half of it); one torch thread in every process (OMP/MKL/OpenBLAS threads 1 as well); Ray with the
machine's cores and a 100 MiB object store. The defaults are configs/multiagent_simple_spread.yaml's
(2,400 agent steps, 2 minibatches, 5 epochs, learning rate 7e-4).

What differs: RLlib's PPO is synchronous (its runners wait while the learner updates) where ours
samples asynchronously (`runtime.sampling=async`: a policy's batch may hold steps of the previous
version); ours acts in the workers with numpy copies of the networks, RLlib with torch; RLlib
normalizes advantages over the train batch, ours per minibatch; RLlib's runners cut episodes into
fragments of about `batch / (runners x envs)` steps, ours send every `runtime.rollout_steps`=25
ticks.

Each side runs in a child process of its own (`--side ours|rllib`), which starts its own Ray and
prints one JSON line, so that neither side's Ray state or memory leaks into the other; the sides
run one after the other (alternating which goes first over `--repeats`) and the medians are shown.
The measurement parts (`PeakMemory`, `Progress`, the child processes, medians and ratios) are
benchmarks/peers/side_by_side.py's, shared with benchmarks/peers/vs_rllib.py.

Figures per side and setting:
- env steps/s sampled and trained, from the end of the first update (RLlib: iteration) to the end
  of the last; an env step is one step of one environment, 3 agent steps. Ours: the env steps the
  learner received, and the agent steps it updated on divided by 3. RLlib:
  `env_runners/num_env_steps_sampled_lifetime` for both, since each of its PPO iterations trains on
  exactly the steps it sampled (its `num_module_steps_trained_lifetime`, which counts every
  minibatch of every epoch, is kept in the JSON as `rllib_module_steps_trained`).
- CPU utilization: CPU seconds of the side's whole process tree per wall second and core over the
  same window, with the machine's busy fraction beside it to tell whether other work shared it;
  and the same window's CPU split into cores of the driver (the learner), of the env workers and
  of the rest (Ray's own processes).
- peak PSS: the largest sum of PSS over the process tree, sampled every 0.25 s.
- the mean return of an agent's episode at the end (last 100 episodes), as a check that both sides
  learn (RLlib: `env_runners/agent_episode_returns_mean`, averaged over the agents).
- the raw bound of the machine, measured after each repeat: `--workers` processes at once, each
  stepping `--num-envs` environments with one batched numpy inference of the (64, 64) policy per
  tick and nothing else, their env steps/s summed; each side is shown as a fraction of it.

    python benchmarks/peers/multiagent_vs_rllib.py [--settings shared per_agent] [--repeats 1] [--max-seconds 150]

Needs RLlib (see benchmarks/peers/vs_rllib.py) and, next to it, `pip install pettingzoo==1.27.0
mpe2==1.1.1 pygame-ce==2.5.8` (`--no-deps` if pip wants to change gymnasium or numpy). Prints a
Markdown table and writes benchmarks/results/multiagent_vs_rllib.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import common
from benchmarks.peers.side_by_side import (
    OBJECT_STORE_BYTES,
    PeakMemory,
    Progress,
    bound_rows,
    cell,
    check_target,
    cost_columns,
    load_columns,
    median_of,
    pin_threads,
    ratios,
    run_child,
    share_of_bound,
    table_sides,
)

pin_threads()

RESULTS = Path(__file__).resolve().parents[1] / "results" / "multiagent_vs_rllib.json"
SIDES = ("ours", "rllib")
RAW = "raw"  # the raw bound's loop processes
ENV_ID = "pettingzoo:mpe2.simple_spread_v3"
ENV_KWARGS = {"N": 3, "max_cycles": 25, "local_ratio": 0.5, "continuous_actions": False}
AGENTS = tuple(f"agent_{index}" for index in range(ENV_KWARGS["N"]))
SETTINGS = {"shared": ("shared",), "per_agent": AGENTS}  # policy ids; the mapping follows from them
HIDDEN_SIZES = [64, 64]
TARGET_RATIO = 3.0  # ours at least 3x RLlib's env steps/s


#: Process titles of the env workers: ours Ray actors, RLlib's env runners.
WORKER_TITLES = ("ray::ActorProcess", "ray::MultiAgentEnvRunner")


def cpu_seconds_by_role() -> dict[str, float]:
    """CPU seconds so far of this process (the driver, where both sides' learner runs), of the env
    workers and of everything else in its tree (Ray's own processes)."""
    import psutil

    root = psutil.Process()
    totals = {"driver": sum(root.cpu_times()[:2]), "workers": 0.0, "other": 0.0}
    for process in root.children(recursive=True):
        try:
            title = " ".join(process.cmdline())
            seconds = sum(process.cpu_times()[:2])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        totals["workers" if title.startswith(WORKER_TITLES) else "other"] += seconds
    return totals


class RoleProgress(Progress):
    """`Progress` that also splits the steady window's CPU among the driver, the workers and the rest."""

    def update(self, sampled: float, trained: float, return_mean: float | None, **figures: float | None) -> None:
        super().update(sampled, trained, return_mean, **figures)
        if self.updates == 1:
            self.roles_start = (time.monotonic(), cpu_seconds_by_role())

    def finish(self) -> None:
        if self.updates > 1:
            (start, before), after = self.roles_start, cpu_seconds_by_role()
            wall = max(time.monotonic() - start, 1e-9)
            self.figures.update({f"{role}_cores": (after[role] - before[role]) / wall for role in before})
        super().finish()


def mapping_of(setting: str) -> dict[str, str]:
    """Agent id -> policy id: all agents on the one shared policy, or each on its own."""
    return {agent: "shared" if setting == "shared" else agent for agent in AGENTS}


def run_ours(args: argparse.Namespace, progress: Progress) -> None:
    from lamarckian_hpc.config import RunConfig
    from lamarckian_hpc.runtime.placement.ray_setup import ray_cpus, start_ray_while_importing

    config = RunConfig.model_validate({
        "seed": args.seed,
        "env": {"id": ENV_ID, "num_envs": args.num_envs, "kwargs": ENV_KWARGS},
        "model": {"policy_hidden_sizes": HIDDEN_SIZES, "critic_hidden_sizes": [], "share_trunk": False,
                  "activation": "tanh"},
        "algorithm": {"batch_size": args.batch_size, "num_minibatches": args.batch_size // args.minibatch_size,
                      "num_epochs": args.epochs, "learning_rate": args.learning_rate, "gamma": 0.99,
                      "gae_lambda": 0.95, "clip_range": 0.2, "entropy_weight": 0.01, "max_grad_norm": 0.5},
        "multiagent": {"policies": list(SETTINGS[args.setting]), "mapping": mapping_of(args.setting),
                       "centralized_critic": False},
        "runtime": {"mode": "ray", "sampling": "async", "num_actors": args.workers, "device": "cpu",
                    "torch_threads": 1, "rollout_steps": 25},
        "stop": {"total_env_steps": args.frames, "return_window": 100},
    })
    start_ray_while_importing(None, ray_cpus(args.workers))  # as `lamarckian-hpc train` starts it
    from lamarckian_hpc.runtime.runners.distributed import DistributedTrainer

    class Observer:
        def on_update_end(self, report) -> None:
            # report.trained_steps counts agent steps; an env step is one of each agent.
            progress.update(report.env_frames, report.trained_steps / len(AGENTS),
                            report.recent_return_mean if report.episodes else None)

        def on_train_end(self, result) -> None:
            pass

    trainer = DistributedTrainer(config, [Observer()])
    # The trainer's wall clock starts with training; the budget counts from the process's start, as RLlib's does.
    stop = config.stop.model_copy(update={"max_wall_seconds": max(1.0, args.max_seconds - progress.seconds())})
    trainer.config = trainer.config.model_copy(update={"stop": stop})
    try:
        trainer.train()
    finally:
        progress.finish()
        trainer.close()


def make_rllib_env(env_config: dict):
    """RLlib's env factory: the same mpe2 parallel env, in RLlib's PettingZoo wrapper."""
    from mpe2 import simple_spread_v3
    from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv

    return ParallelPettingZooEnv(simple_spread_v3.parallel_env(**env_config))


def run_rllib(args: argparse.Namespace, progress: Progress, extra: dict) -> None:
    import ray
    import torch

    torch.set_num_threads(1)
    from ray import tune
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    ray.init(address="local", num_cpus=os.cpu_count() or 1, include_dashboard=False, logging_level=logging.WARNING,
             object_store_memory=OBJECT_STORE_BYTES)
    tune.register_env("mpe2_simple_spread", make_rllib_env)
    policies = SETTINGS[args.setting]
    mapping = mapping_of(args.setting)
    config = (
        PPOConfig()
        .environment("mpe2_simple_spread", env_config=ENV_KWARGS)
        .env_runners(num_env_runners=args.workers, num_envs_per_env_runner=args.num_envs)
        .multi_agent(policies=set(policies), policy_mapping_fn=lambda agent_id, *_, **__: mapping[agent_id],
                     count_steps_by="agent_steps")
        .rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs={pid: RLModuleSpec() for pid in policies}),
                   model_config=DefaultModelConfig(fcnet_hiddens=HIDDEN_SIZES, fcnet_activation="tanh",
                                                   vf_share_layers=False))
        .training(train_batch_size_per_learner=args.batch_size * len(policies),
                  minibatch_size=args.minibatch_size, num_epochs=args.epochs, lr=args.learning_rate, gamma=0.99,
                  lambda_=0.95, clip_param=0.2, entropy_coeff=0.01, vf_loss_coeff=0.25, vf_clip_param=1e9,
                  grad_clip=0.5, use_kl_loss=False)
        .reporting(metrics_num_episodes_for_smoothing=100)
        .debugging(seed=args.seed)
    )
    algo = config.build_algo()
    try:
        while True:
            result = algo.train()
            runners = result.get("env_runners", {})
            sampled = runners.get("num_env_steps_sampled_lifetime", 0)
            per_agent = runners.get("agent_episode_returns_mean") or {}
            returns = [value for value in per_agent.values() if value is not None]
            progress.update(sampled, sampled, statistics.mean(returns) if returns else None)
            learners = result.get("learners", {}).get("__all_modules__", {})
            extra["rllib_module_steps_trained"] = learners.get("num_module_steps_trained_lifetime")
            if sampled >= args.frames or progress.out_of_time:
                break
        progress.finish()
    finally:
        algo.stop()
        ray.shutdown()


def run_side(args: argparse.Namespace) -> None:
    """Child process: run one side of one setting, print one JSON line."""
    memory = PeakMemory()
    progress = RoleProgress(None, args.max_seconds)
    extra: dict = {}
    if args.side == "ours":
        run_ours(args, progress)
    else:
        run_rllib(args, progress, extra)
    peak_pss, peak_rss = memory.stop()
    print(json.dumps({"side": args.side, "setting": args.setting, **progress.summary(), **extra,
                      "peak_pss_bytes": peak_pss, "peak_rss_bytes": peak_rss,
                      "peak_pss_by_process": memory.peak_breakdown}), flush=True)


def run_raw_loop(args: argparse.Namespace) -> None:
    """Child process: one process of the raw bound, `--num-envs` environments stepped with one
    batched numpy inference of a (64, 64) tanh policy per tick over all their agents, nothing else;
    prints its env steps/s as one JSON line."""
    import numpy as np
    from mpe2 import simple_spread_v3

    rng = np.random.default_rng(args.seed)
    envs = [simple_spread_v3.parallel_env(**ENV_KWARGS) for _ in range(args.num_envs)]
    observations = [env.reset(seed=args.seed + index)[0] for index, env in enumerate(envs)]
    sizes = [envs[0].observation_space(AGENTS[0]).shape[0], *HIDDEN_SIZES, int(envs[0].action_space(AGENTS[0]).n)]
    layers = [(rng.standard_normal((n_in, n_out)).astype(np.float32) / np.sqrt(n_in), np.zeros(n_out, np.float32))
              for n_in, n_out in zip(sizes, sizes[1:])]

    def tick() -> None:
        rows = np.stack([obs[agent] for obs in observations for agent in AGENTS])
        for index, (weight, bias) in enumerate(layers):
            rows = rows @ weight + bias
            rows = np.tanh(rows) if index < len(layers) - 1 else rows
        actions = (rows + rng.gumbel(size=rows.shape)).argmax(axis=1).reshape(len(envs), len(AGENTS))
        for index, env in enumerate(envs):
            observations[index] = env.step(dict(zip(AGENTS, actions[index].tolist())))[0]
            if not env.agents:
                observations[index] = env.reset()[0]

    for _ in range(50):  # warm-up
        tick()
    ticks, start = 0, time.perf_counter()
    while time.perf_counter() - start < args.raw_seconds:
        tick()
        ticks += 1
    seconds = time.perf_counter() - start
    print(json.dumps({"side": RAW, "steps_per_second": ticks * len(envs) / seconds}), flush=True)


def measure_raw_bound(args: argparse.Namespace) -> dict:
    """`--workers` raw loops at once; the bound is the sum of their env steps/s."""
    command = child_command(args, RAW, "shared")
    children = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for _ in range(args.workers)]
    rates = []
    for child in children:
        stdout, stderr = child.communicate(timeout=args.raw_seconds + 120)
        lines = [line for line in stdout.splitlines() if line.startswith("{")]
        if child.returncode != 0 or not lines:
            tail = "\n".join((stdout + stderr).splitlines()[-30:])
            print(f"raw bound failed (exit {child.returncode}):\n{tail}", file=sys.stderr)
            return {"side": RAW, "error": f"exit {child.returncode}", "log_tail": tail}
        rates.append(json.loads(lines[-1])["steps_per_second"])
    return {"side": RAW, "processes": len(rates), "per_process_steps_per_second": rates,
            "steps_per_second": sum(rates)}


def child_command(args: argparse.Namespace, side: str, setting: str) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--side", side, "--setting", setting,
            "--workers", str(args.workers), "--num-envs", str(args.num_envs), "--batch-size", str(args.batch_size),
            "--minibatch-size", str(args.minibatch_size), "--epochs", str(args.epochs),
            "--learning-rate", str(args.learning_rate), "--frames", str(args.frames),
            "--max-seconds", str(args.max_seconds), "--seed", str(args.seed), "--raw-seconds", str(args.raw_seconds)]


FIGURES = ("sampled_steps_per_second", "trained_steps_per_second", "cpu_utilization", "machine_cpu_utilization",
           "driver_cores", "workers_cores", "other_cores", "peak_pss_bytes", "peak_rss_bytes", "first_update_seconds",
           "return_mean")


def summarize(runs: list[dict], setting: str) -> dict:
    summary: dict = {"setting": setting, "policies": list(SETTINGS[setting])}
    for side in SIDES:
        records = [run for run in runs if run["setting"] == setting and run["side"] == side and "error" not in run]
        summary[side] = {key: median_of(records, key) for key in FIGURES}
        summary[side]["runs"] = len(records)
    summary["ratio"] = ratios(summary["ours"], summary["rllib"], FIGURES[:-1])
    raw = median_of([run for run in runs if run["side"] == RAW and "error" not in run], "steps_per_second")
    summary["raw_bound"] = {"sampled_steps_per_second": raw}
    summary["ours_of_raw_bound"] = share_of_bound(summary["ours"], raw)
    summary["rllib_of_raw_bound"] = share_of_bound(summary["rllib"], raw)
    label, value, shown, met = check_target(summary, "sampled_ratio", TARGET_RATIO, "RLlib")
    summary["target"] = {"label": label, "value": value, "met": None if value is None else met}
    return summary


def print_table(summaries: list[dict]) -> None:
    print("| policies | side | env steps/s sampled | env steps/s trained | CPU utilization (tree) | CPU busy (machine) "
          "| cores: driver / workers / Ray | peak PSS (GB) | first update (s) | return per agent |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for summary in summaries:
        for name, figures, is_ratio in table_sides(summary, "RLlib"):
            cores = " / ".join(cell(figures[f"{role}_cores"], ".2f") for role in ("driver", "workers", "other"))
            columns = load_columns(figures, is_ratio) + [cores] + cost_columns(figures, is_ratio) + [
                "" if is_ratio else cell(figures["return_mean"], ".1f")]
            print(f"| {summary['setting']} | {name} | " + " | ".join(columns) + " |")
        print("\n".join(bound_rows(summary["setting"], summary["raw_bound"]["sampled_steps_per_second"],
                                   {"ours": summary["ours_of_raw_bound"], "RLlib": summary["rllib_of_raw_bound"]}, 8)))
    print()
    for summary in summaries:
        target = summary["target"]
        verdict = "no figure" if target["met"] is None else "met" if target["met"] else "not met"
        print(f"- {summary['setting']}: {target['label']}: {cell(target['value'], '.2f')}x, {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", nargs="+", choices=tuple(SETTINGS), default=list(SETTINGS),
                        help="shared: one policy for all agents; per_agent: one policy per agent")
    parser.add_argument("--repeats", type=int, default=1, help="runs per side and setting; medians shown")
    parser.add_argument("--workers", type=int, default=2, help="env-worker processes on each side")
    parser.add_argument("--num-envs", type=int, default=8, help="environments per worker")
    parser.add_argument("--batch-size", type=int, default=2400, help="agent steps per train batch of a policy")
    parser.add_argument("--minibatch-size", type=int, default=1200, help="agent steps per minibatch")
    parser.add_argument("--epochs", type=int, default=5, help="passes over each train batch")
    parser.add_argument("--learning-rate", type=float, default=7e-4, help="Adam step size on both sides")
    parser.add_argument("--frames", type=int, default=1_000_000, help="env steps per run at most")
    parser.add_argument("--max-seconds", type=float, default=150.0, help="wall budget per run, from process start")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--raw-seconds", type=float, default=10.0,
                        help="seconds each process of the raw bound steps (0: do not measure the bound)")
    parser.add_argument("--side", choices=(*SIDES, RAW), help=argparse.SUPPRESS)
    parser.add_argument("--setting", choices=tuple(SETTINGS), help=argparse.SUPPRESS)
    common.add_common_args(parser)
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
        for setting in args.settings:
            order = SIDES if repeat % 2 == 0 else SIDES[::-1]
            for side in order:
                print(f"repeat {repeat + 1}/{args.repeats}: {side}, {setting}", file=sys.stderr, flush=True)
                record = run_child(child_command(args, side, setting), side, args.max_seconds, setting)
                runs.append({"repeat": repeat, "setting": setting, **record})
        if args.raw_seconds > 0:
            print(f"repeat {repeat + 1}/{args.repeats}: raw bound", file=sys.stderr, flush=True)
            runs.append({"repeat": repeat, "setting": None, **measure_raw_bound(args)})
    summaries = [summarize(runs, setting) for setting in args.settings]
    print(f"\nsimple_spread_v3 (3 agents), {args.workers} workers x {args.num_envs} envs, batch {args.batch_size} "
          f"agent steps per policy, minibatch {args.minibatch_size}, {args.epochs} epochs; {os.cpu_count()} cores; "
          f"medians of {args.repeats} run(s) per side\n")
    print_table(summaries)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    settings = {key: (str(value) if isinstance(value, Path) else value) for key, value in vars(args).items()
                if key not in ("side", "setting")}
    common.write_results(args.output, {
        "benchmark": "multiagent_vs_rllib", "env": {"id": ENV_ID, "kwargs": ENV_KWARGS}, "hidden_sizes": HIDDEN_SIZES, "settings": settings,
        "target_sampled_ratio": TARGET_RATIO, "summaries": summaries, "runs": runs,
    }, args.label)
    print(f"\nwritten: {args.output}")


if __name__ == "__main__":
    main()
