"""Our distributed PPO against RLlib's PPO, on the same machine, in the same run, alternating.

Both sides get the same work: two env-worker processes (ours: `runtime.num_actors=2`; RLlib:
`num_env_runners=2`), 8 environments per worker, the same model, train batch, minibatch and epochs
(per environment in `ENVS` below), the same PPO hyperparameters where both have them (lr, gamma
0.99, lambda 0.95, clip 0.2, entropy 0.01, gradient norm 0.5, no KL penalty, no value clip;
RLlib's own defaults, lr 5e-5, lambda 1.0, clip 0.3, a KL penalty and a value clip of 10, would
compare the tuning rather than the systems), one torch thread in every process, and the learner
in the driver. Ray gets the machine's cores and a 100 MiB object store on both sides.

- CartPole-v1, Pendulum-v1: a (256, 128) tanh trunk shared by policy and value function. Ours
  keeps its small critic layers (128, 64) on top of the trunk where RLlib's value head is linear,
  and RLlib's value-loss weight is 0.01, the value of its tuned CartPole example for a shared
  trunk (with 0.25, the weight equal to ours, one run here had not reached 475 after 1.9M env
  steps). A CartPole run ends at a mean return of 475 (or the budget); results in vs_rllib.json.
- lamarckian/PongImage-v0 (the paper's Image Pong): ours is ALE Pong through gymnasium's
  AtariPreprocessing (grey 84x84, frame skip 4, sticky actions 0.25, uint8 (4, 84, 84)) and the
  paper's Table III CNN, (ConvK4S2) x 4 with 32/64/64/64 channels then FC(256), LeakyReLU,
  shared by policy and value. RLlib plays `ALE/Pong-v5` (frame skip 1, sticky actions 0.25)
  through its `wrap_atari_for_new_api_stack` (84x84 grey, max-and-skip 4, 4 frames, observations
  scaled to float32 [-1, 1]) with `conv_filters` of the same channels, kernels and strides ("same"
  padding: 6x6 at the end where ours has 5x5), LeakyReLU, and `head_fcnet_hiddens=[256]`: RLlib
  has no dense layer in its CNN encoder, so the FC(256) sits in each head, policy and value.
  Batch 4096, minibatch 256, one epoch, lr 2.5e-4, value weight 0.25 on RLlib (ours: 0.5 x half
  the squared error). Results in the entry `pong_image` of vs_rllib.json.
- football:<scenario> (Google Research Football, simple115v2, scoring rewards, ours
  `lamarckian/Football-v0`; RLlib gets the same env through `tune.register_env`): policy and value
  each on its own (64, 64) tanh trunk on both sides, batch 2048, 4 epochs of minibatches of 512,
  lr 1e-3 (configs/ppo_football_empty_goal_close.yaml). The score rate is the share of the last
  100 episodes whose return (goals for minus goals against) is positive: in an academy scenario,
  the share that ended in a goal. Every update is kept (`curve`) for the score rate against env
  steps and wall time. Results in the entry `football_<scenario>` of vs_rllib.json.

Each side runs in a subprocess of its own (`--side ours|rllib`), which starts its own Ray and
prints one JSON line, so that neither side's Ray state or memory leaks into the other; the parent
alternates the sides (and which goes first) over `--repeats` and prints the medians. The
measurement parts (peak PSS, CPU accounting, child processes) are in benchmarks/peers/side_by_side.py.

Figures per side (env steps/s sampled and trained, CPU utilization of the side's process tree and
the machine's busy fraction, peak PSS, time to the first update, to the target return, and the
raw bound of the machine for the vector envs) are described in docs/benchmarks/sampling.md. Rates
run from the end of the first update (RLlib: iteration) to the end of the last; RLlib's trained
steps are `num_module_steps_trained_lifetime` (whole minibatches of every epoch, bootstrap steps
included) divided by the epochs, ours each step of every batch the learner updated on once. A run
ends at its budget (`max_seconds` per env): ours' trainer gets what is left of it when its config is
built and stops after the update that passes it, counting from the end of its start-up, so it runs
past the budget by its start-up; RLlib stops before an iteration that would, as long as its last,
end past it.

    python benchmarks/peers/vs_rllib.py [--envs CartPole-v1 Pendulum-v1] [--repeats 1] [--max-seconds 300]
    python benchmarks/peers/vs_rllib.py --envs lamarckian/PongImage-v0          # ale-py in both venvs
    python benchmarks/peers/vs_rllib.py --envs lamarckian/PongImage-v0 --cnn-precision bfloat16
    python benchmarks/peers/vs_rllib.py --envs football:academy_empty_goal_close  # gfootball's venv

Needs RLlib: `pip install "ray[rllib]==2.60.0"` pins gymnasium 1.2.2 against our tested 1.4.0; with
gymnasium kept, its other extras suffice: `pip install --no-deps dm_tree absl-py lz4 ormsgpack
pyarrow tensorboardX "pandas<3" pytz tzdata`. Our side needs none of them, and where pyarrow is
installed Ray imports it into every process that serializes (ray/_private/arrow_serialization.py),
about 11 MB an actor here: `--ours-python VENV/bin/python` runs our side on a virtual environment
with this package alone (`pip install -c constraints.txt -e .`), as our users install it, the
same pinned versions of Ray, torch and gymnasium. Prints a Markdown table per results file and writes it.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

from benchmarks import common
from benchmarks.peers.side_by_side import (
    CHILD_START_SLACK_SECONDS,
    OBJECT_STORE_BYTES,
    SINGLE_THREAD,
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
    score_at,
    share_of_bound,
    table_sides,
    target_cell,
)

pin_threads()

RESULTS = Path(__file__).resolve().parents[1] / "results"
SIDES = ("ours", "rllib")
UNBOUNDED_FRAMES = 10**12
RAW = "raw"  # the raw bound's loop processes
RAW_WARMUP_FRAMES = 2_000
CLASSIC_TARGETS = {"trained_ratio": 5.0, "cpu_utilization": 0.95, "target_time_ratio": 0.5, "pss_ratio": 0.45,
                   "first_update_seconds": 5.0, "raw_bound_fraction": 0.7}
SHARED_MLP = {"ours_model": {"policy_hidden_sizes": [256, 128], "activation": "tanh", "share_trunk": True},
              "rllib_model": {"fcnet_hiddens": [256, 128], "fcnet_activation": "tanh", "vf_share_layers": True}}
CLASSIC = {"results": "vs_rllib", **SHARED_MLP, "batch_size": 4096, "minibatch_size": 512, "epochs": 1,
           "learning_rate": 3e-4, "rllib_vf_loss_coeff": 0.01, "return_window": 20, "frames": 500_000,
           "max_seconds": 300.0, "raw_bound": True, "targets": CLASSIC_TARGETS}
FOOTBALL = {**CLASSIC, "env_id": "lamarckian/Football-v0", "rllib_env": "football", "raw_bound": False,
            "ours_model": {"policy_hidden_sizes": [64, 64], "critic_hidden_sizes": [], "share_trunk": False,
                           "activation": "tanh"},
            "rllib_model": {"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh", "vf_share_layers": False},
            "batch_size": 2048, "minibatch_size": 512, "epochs": 4, "learning_rate": 1e-3, "rllib_vf_loss_coeff": 0.25,
            "return_window": 100, "frames": UNBOUNDED_FRAMES, "score_rate": True,
            "targets": {"sampled_ratio": 2.0, "trained_ratio": 2.0}}
#: Per environment (the `--envs` names): what each side runs, and the results file it goes to.
ENVS: dict[str, dict] = {
    "CartPole-v1": {**CLASSIC, "env_id": "CartPole-v1", "target_return": 475.0, "stop_at_target": True},
    "Pendulum-v1": {**CLASSIC, "env_id": "Pendulum-v1"},
    "lamarckian/PongImage-v0": {
        **CLASSIC, "results": "vs_rllib_pong_image", "env_id": "lamarckian/PongImage-v0", "rllib_env": "atari",
        "ours_model": {"kind": "cnn", "critic_hidden_sizes": [], "share_trunk": True, "activation": "leaky_relu"},
        "rllib_model": {"conv_filters": [[32, 4, 2], [64, 4, 2], [64, 4, 2], [64, 4, 2]], "conv_activation": "LeakyReLU",
                        "head_fcnet_hiddens": [256], "head_fcnet_activation": "LeakyReLU", "vf_share_layers": True},
        "batch_size": 4096, "minibatch_size": 256, "learning_rate": 2.5e-4, "rllib_vf_loss_coeff": 0.25,
        "frames": UNBOUNDED_FRAMES, "max_seconds": 220.0, "raw_bound": False,
        "targets": {"sampled_ratio": 2.0, "trained_ratio": 2.0, "cpu_utilization": 0.95}},
    "football:academy_empty_goal_close": {
        **FOOTBALL, "results": "vs_rllib_football_empty_goal_close", "max_seconds": 160.0, "target_return": 0.8,
        "env_kwargs": {"scenario": "academy_empty_goal_close", "representation": "simple115v2", "rewards": "scoring"}},
    "football:11_vs_11_easy_stochastic": {
        **FOOTBALL, "results": "vs_rllib_football_11_vs_11_easy", "max_seconds": 130.0,
        "env_kwargs": {"scenario": "11_vs_11_easy_stochastic", "representation": "simple115v2", "rewards": "scoring"}},
}
#: Settings the command line may override for every env it runs.
OVERRIDABLE = ("workers", "num_envs", "batch_size", "minibatch_size", "epochs", "learning_rate", "frames",
               "max_seconds", "target_return", "rllib_vf_loss_coeff", "seed", "sampling", "raw_frames")
SCORE_SECONDS = (30, 60, 90, 120, 150, 180, 240, 300)
SCORE_FRAMES = (10_000, 25_000, 50_000, 100_000, 200_000, 400_000)


def resolve(name: str, args: argparse.Namespace) -> dict:
    """The env's settings from ENVS, with what the command line set on top."""
    base = {"workers": 2, "num_envs": 8, "seed": 0, "sampling": "async", "raw_frames": 100_000, "target_return": None,
            "stop_at_target": False, "score_rate": False, "env_kwargs": {}, "rllib_env": None, **ENVS[name]}
    given = {key: getattr(args, key) for key in OVERRIDABLE if getattr(args, key) is not None}
    settings = {**base, **given, "name": name, "ours_python": args.ours_python}
    if args.cnn_precision and settings["ours_model"].get("kind") == "cnn":
        settings["ours_model"] = {**settings["ours_model"], "cnn_precision": args.cnn_precision}
    if settings["stop_at_target"] and settings["target_return"] is not None:
        settings["frames"] = UNBOUNDED_FRAMES  # a run with a return target goes on until it reaches it (or the budget)
    return settings


def score_rate(returns) -> float | None:
    returns = list(returns)
    return sum(value > 0 for value in returns) / len(returns) if returns else None


def run_ours(s: dict, progress: Progress) -> None:
    from lamarckian_hpc.config import RunConfig
    from lamarckian_hpc.runtime.placement.ray_setup import ray_cpus, start_ray_while_importing

    config = RunConfig.model_validate({
        "seed": s["seed"],
        "env": {"id": s["env_id"], "num_envs": s["num_envs"], "kwargs": s["env_kwargs"]},
        "model": s["ours_model"],
        "algorithm": {"batch_size": s["batch_size"], "num_minibatches": s["batch_size"] // s["minibatch_size"],
                      "num_epochs": s["epochs"], "learning_rate": s["learning_rate"]},
        "runtime": {"mode": "ray", "sampling": s["sampling"], "num_actors": s["workers"], "device": "cpu",
                    "torch_threads": 1},
        "stop": {"total_env_steps": s["frames"], "target_return": progress.target_return if s["stop_at_target"] else None,
                 "return_window": s["return_window"], "max_wall_seconds": max(1.0, s["max_seconds"] - progress.seconds())},
    })

    start_ray_while_importing(None, ray_cpus(s["workers"]))  # as `lamarckian-hpc train` starts it
    from lamarckian_hpc.runtime.runners.distributed import DistributedTrainer

    class Observer:
        trainer = None

        def on_update_end(self, report) -> None:
            window_full = report.episodes >= config.stop.return_window
            figures = {}
            if s["score_rate"]:
                returns = self.trainer.progress.episodes.returns
                figures = {"score_rate": score_rate(returns), "episodes": report.episodes}
            progress.update(report.env_frames, report.trained_steps,
                            report.recent_return_mean if window_full else None, **figures)

        def on_train_end(self, result) -> None:
            pass

    observer = Observer()
    trainer = observer.trainer = DistributedTrainer(config, [observer])
    try:
        trainer.train()
    finally:
        progress.finish()
        trainer.close()


def make_atari_pong(env_config: dict):
    """RLlib's Atari pipeline on ALE Pong, in an RLlib env runner."""
    import ale_py
    import gymnasium as gym
    from ray.rllib.env.wrappers.atari_wrappers import wrap_atari_for_new_api_stack

    gym.register_envs(ale_py)
    env = gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.25, full_action_space=False,
                   **dict(env_config))
    return wrap_atari_for_new_api_stack(env, dim=84, framestack=4)


def make_ours(env_id: str, env_config: dict):
    """One of our ids in an RLlib env runner: our ids need our package imported."""
    import gymnasium as gym

    import lamarckian_hpc.envs  # noqa: F401 - registers lamarckian/* ids

    return gym.make(env_id, **dict(env_config))


def log_score(*, episode, metrics_logger=None, **_) -> None:
    """RLlib callback: 1 for an episode with a positive return, 0 otherwise, over the last 100."""
    if metrics_logger is not None:
        metrics_logger.log_value("score_rate", float(episode.get_return() > 0), reduce="mean", window=100)


def run_rllib(s: dict, progress: Progress) -> None:
    import ray
    import torch
    from ray import tune

    torch.set_num_threads(1)
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    ray.init(address="local", num_cpus=os.cpu_count() or 1, include_dashboard=False, logging_level=logging.WARNING,
             object_store_memory=OBJECT_STORE_BYTES)
    env = s["env_id"]
    if s["rllib_env"] == "atari":
        env = "vs_rllib_atari_pong"
        tune.register_env(env, make_atari_pong)
    elif s["rllib_env"] is not None:
        env = f"vs_rllib_{s['rllib_env']}"
        tune.register_env(env, functools.partial(make_ours, s["env_id"]))
    config = (
        PPOConfig()
        .environment(env, env_config=s["env_kwargs"] if s["rllib_env"] not in (None, "atari") else {})
        .env_runners(num_env_runners=s["workers"], num_envs_per_env_runner=s["num_envs"])
        .training(train_batch_size_per_learner=s["batch_size"], minibatch_size=s["minibatch_size"],
                  num_epochs=s["epochs"], lr=s["learning_rate"], gamma=0.99, lambda_=0.95, clip_param=0.2,
                  entropy_coeff=0.01, vf_loss_coeff=s["rllib_vf_loss_coeff"], vf_clip_param=1e9, grad_clip=0.5,
                  use_kl_loss=False)
        .rl_module(model_config=DefaultModelConfig(**s["rllib_model"]))
        .reporting(metrics_num_episodes_for_smoothing=s["return_window"])
        .debugging(seed=s["seed"])
    )
    if s["score_rate"]:
        config = config.callbacks(on_episode_end=log_score)
    algo = config.build_algo()
    try:
        while True:
            result = algo.train()
            runners = result.get("env_runners", {})
            sampled = runners.get("num_env_steps_sampled_lifetime", 0)
            learners = result.get("learners", {}).get("__all_modules__", {})
            trained = learners.get("num_module_steps_trained_lifetime", 0) / s["epochs"]  # it counts every epoch
            figures = ({"score_rate": runners.get("score_rate"), "episodes": runners.get("num_episodes_lifetime")}
                       if s["score_rate"] else {})
            progress.update(sampled, trained, runners.get("episode_return_mean"), **figures)
            if (progress.reached and s["stop_at_target"]) or sampled >= s["frames"] or progress.next_update_late():
                break
        progress.finish()
    finally:
        algo.stop()
        ray.shutdown()


def run_side(side: str, s: dict) -> None:
    """Child process: run one side, print one JSON line. Torch is the sides' own to import: ours
    imports it while its Ray starts, as `lamarckian-hpc train` does (one thread: `torch_threads`)."""
    memory = PeakMemory()
    progress = Progress(s["target_return"], s["max_seconds"], curve=s["score_rate"])
    (run_ours if side == "ours" else run_rllib)(s, progress)
    peak_pss, peak_rss = memory.stop()
    record = {"side": side, "env": s["name"], **progress.summary(), "peak_pss_bytes": peak_pss,
              "peak_rss_bytes": peak_rss, "peak_pss_by_process": memory.peak_breakdown}
    print(json.dumps(record), flush=True)


def run_raw_loop(s: dict) -> None:
    """Child process: one process of the raw bound; prints its env steps/s as one JSON line."""
    import gymnasium as gym
    import torch

    from benchmarks.scale.raw_bound import RawLoop, run_config
    from lamarckian_hpc.runtime.algorithms import build_model

    torch.set_num_threads(1)
    config = run_config(s["env_id"], s["num_envs"], s["raw_frames"])
    probe = gym.make(s["env_id"])
    loop = RawLoop(config, build_model(config, probe.observation_space, probe.action_space))
    loop.run(RAW_WARMUP_FRAMES)
    seconds = loop.run(s["raw_frames"])
    print(json.dumps({"side": RAW, "env": s["name"], "steps_per_second": s["raw_frames"] / seconds}), flush=True)


def child_command(side: str, s: dict) -> list[str]:
    """Our side runs on `--ours-python` when given (an install of this package alone), the rest here."""
    python = (s.get("ours_python") or sys.executable) if side == "ours" else sys.executable
    return [python, str(Path(__file__).resolve()), "--side", side, "--settings", json.dumps(s)]


def measure_raw_bound(s: dict) -> dict:
    """`workers` raw loops at once, one per core; the bound is the sum of their env steps/s."""
    children = [subprocess.Popen(child_command(RAW, s), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, env={**os.environ, **SINGLE_THREAD}) for _ in range(s["workers"])]
    rates = []
    for child in children:
        stdout, stderr = child.communicate(timeout=CHILD_START_SLACK_SECONDS)
        lines = [line for line in stdout.splitlines() if line.startswith("{")]
        if child.returncode != 0 or not lines:
            tail = "\n".join((stdout + stderr).splitlines()[-30:])
            print(f"raw bound on {s['name']} failed (exit {child.returncode}):\n{tail}", file=sys.stderr)
            return {"side": RAW, "env": s["name"], "error": f"exit {child.returncode}", "log_tail": tail}
        rates.append(json.loads(lines[-1])["steps_per_second"])
    return {"side": RAW, "env": s["name"], "processes": len(rates), "per_process_steps_per_second": rates,
            "steps_per_second": sum(rates)}


FIGURES = ("sampled_steps_per_second", "trained_steps_per_second", "cpu_utilization", "machine_cpu_utilization",
           "peak_pss_bytes", "peak_rss_bytes", "first_update_seconds", "target_seconds", "target_frames",
           "score_rate", "env_steps_sampled", "seconds")


def summarize(runs: list[dict], name: str, s: dict) -> dict:
    summary: dict = {"env": name}
    for side in SIDES:
        records = [run for run in runs if run["env"] == name and run["side"] == side and "error" not in run]
        summary[side] = {key: median_of(records, key) for key in FIGURES}
        targeted = [run["target_seconds"] is not None for run in records if run["target_return"] is not None]
        summary[side]["target_reached"] = f"{sum(targeted)}/{len(targeted)}" if targeted else None
        summary[side]["runs"] = len(records)
        if s["score_rate"] and records:  # the first run's curve, read at common wall times and env steps
            curve = records[0]["curve"]
            summary[side]["score_rate_at_seconds"] = score_at(curve, "seconds", SCORE_SECONDS, curve[-1]["seconds"])
            summary[side]["score_rate_at_frames"] = score_at(curve, "env_steps_sampled", SCORE_FRAMES,
                                                             curve[-1]["env_steps_sampled"])
    ours, rllib = summary["ours"], summary["rllib"]
    summary["ratio"] = ratios(ours, rllib, FIGURES)
    if s["raw_bound"]:
        raw = median_of([run for run in runs if run["env"] == name and run["side"] == RAW and "error" not in run],
                        "steps_per_second")
        summary["raw_bound"] = {"sampled_steps_per_second": raw}
        summary["ours_of_raw_bound"] = share_of_bound(ours, raw)
    if ours["target_seconds"] is not None and rllib["target_reached"] is not None and rllib["target_seconds"] is None:
        # RLlib's time to the target lies beyond the budget, so the ratio is below this bound.
        summary["ratio"]["target_seconds_below"] = ours["target_seconds"] / s["max_seconds"]
    return summary


def print_table(summaries: list[dict]) -> None:
    print("| env | side | env steps/s sampled | env steps/s trained | CPU utilization (tree) | CPU busy (machine) "
          "| peak PSS (GB) | first update (s) | time to target (s, env steps) | score rate |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for summary in summaries:
        for name, figures, is_ratio in table_sides(summary, "RLlib"):
            columns = load_columns(figures, is_ratio) + cost_columns(figures, is_ratio) + [
                target_cell(figures, is_ratio), cell(figures["score_rate"], ".2f")]
            print(f"| {summary['env']} | {name} | " + " | ".join(columns) + " |")
        if "raw_bound" in summary:
            print("\n".join(bound_rows(summary["env"], summary["raw_bound"]["sampled_steps_per_second"],
                                       {"ours": summary["ours_of_raw_bound"]}, 8)))
        for side in SIDES:
            for key in ("score_rate_at_seconds", "score_rate_at_frames"):
                if key in summary[side]:
                    marks = ", ".join(f"{mark}: {cell(value, '.2f')}" for mark, value in summary[side][key].items())
                    print(f"\n{summary['env']} {side} score rate at {key.rsplit('_', 1)[1]}: {marks}")


def print_targets(summaries: list[dict], settings: dict[str, dict]) -> None:
    print("\nProject targets (ours, measured above):")
    for summary in summaries:
        for kind, limit in settings[summary["env"]]["targets"].items():
            if kind == "target_time_ratio" and summary["ours"]["target_reached"] is None:
                continue
            label, value, shown, met = check_target(summary, kind, limit, "RLlib")
            print(f"- {summary['env']}: {label}: {shown}, {'no figure' if value is None else 'met' if met else 'not met'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=["CartPole-v1", "Pendulum-v1"], choices=sorted(ENVS),
                        metavar="ENV", help=f"of {', '.join(ENVS)}")
    parser.add_argument("--repeats", type=int, default=1, help="alternating repetitions per env; medians shown")
    parser.add_argument("--workers", type=int, help="env-worker processes on each side (2)")
    parser.add_argument("--num-envs", type=int, help="environments per worker (8)")
    parser.add_argument("--batch-size", type=int, help="env steps per train batch (per env in ENVS)")
    parser.add_argument("--minibatch-size", type=int, help="steps per minibatch")
    parser.add_argument("--epochs", type=int, help="passes over each train batch")
    parser.add_argument("--learning-rate", type=float, help="Adam step size on both sides")
    parser.add_argument("--frames", type=int, help="env steps per run without a return target")
    parser.add_argument("--max-seconds", type=float, help="wall budget per run, from process start")
    parser.add_argument("--target-return", type=float, help="mean return to time (CartPole: 475, ends the run)")
    parser.add_argument("--sampling", choices=("async", "sync"), help="our runtime.sampling (async)")
    parser.add_argument("--rllib-vf-loss-coeff", type=float,
                        help="RLlib's value-loss weight; 0.25 equals ours (0.5 x half the squared error)")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--ours-python",
                        help="the Python of a virtual environment with this package alone (`pip install -e .`), for "
                             "our side; default: this one, which has RLlib's extras too")
    parser.add_argument("--cnn-precision", choices=("float32", "bfloat16"),
                        help="our CNN's model.cnn_precision on image envs (float32); RLlib's stays float32")
    parser.add_argument("--output", type=Path, help="results file (default: the env's own in benchmarks/results)")
    parser.add_argument("--raw-frames", type=int,
                        help="env steps each process of the raw bound takes (0: do not measure the bound)")
    parser.add_argument("--side", choices=(*SIDES, RAW), help=argparse.SUPPRESS)
    parser.add_argument("--settings", help=argparse.SUPPRESS)
    common.add_common_args(parser)
    args = parser.parse_args()
    if args.side is not None:
        (run_raw_loop if args.side == RAW else functools.partial(run_side, args.side))(json.loads(args.settings))
        return
    settings = {name: resolve(name, args) for name in args.envs}
    for name, s in settings.items():
        if s["batch_size"] % s["minibatch_size"]:
            parser.error(f"{name}: the batch size must be a multiple of the minibatch size (ours splits it evenly)")

    runs = []
    for repeat in range(args.repeats):
        for name, s in settings.items():
            order = SIDES if repeat % 2 == 0 else SIDES[::-1]
            for side in order:
                print(f"repeat {repeat + 1}/{args.repeats}: {side} on {name}", file=sys.stderr, flush=True)
                runs.append({"repeat": repeat, "env": name, **run_child(child_command(side, s), side, s["max_seconds"],
                                                                        f"on {name}")})
            if s["raw_bound"] and s["raw_frames"] > 0:
                print(f"repeat {repeat + 1}/{args.repeats}: raw bound on {name}", file=sys.stderr, flush=True)
                runs.append({"repeat": repeat, **measure_raw_bound(s)})
    for results in dict.fromkeys(s["results"] for s in settings.values()):
        names = [name for name, s in settings.items() if s["results"] == results]
        summaries = [summarize(runs, name, settings[name]) for name in names]
        first = settings[names[0]]
        print(f"\n{results}: {first['workers']} workers x {first['num_envs']} envs, batch {first['batch_size']}, "
              f"minibatch {first['minibatch_size']}, {first['epochs']} epoch(s), our sampling {first['sampling']}; "
              f"{os.cpu_count()} cores; medians of {args.repeats} run(s) per side\n")
        print_table(summaries)
        print_targets(summaries, settings)
        # Without --output, every env group is an entry of results/vs_rllib.json: CartPole's is `main`,
        # the others' are named by their group (`pong_image`), followed by --label when one is given.
        output = args.output or RESULTS / "vs_rllib.json"
        label = args.label if args.output is not None else "_".join(
            part for part in (results.removeprefix("vs_rllib").lstrip("_"),
                              "" if args.label == common.DEFAULT_LABEL else args.label) if part) or common.DEFAULT_LABEL
        common.write_results(output, {
            "settings": {**first, "repeats": args.repeats, "envs": names,
                         "per_env": {name: settings[name] for name in names}},
            "summaries": summaries, "runs": [run for run in runs if run["env"] in names],
        }, label)
        print(f"\nwritten: {output} ({label})")


if __name__ == "__main__":
    main()
