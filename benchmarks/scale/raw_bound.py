"""How close the trainer's sampling phase comes to the raw bound of this machine.

The raw bound is the plainest loop that does the same work: K Gymnasium environments in a list,
one batched (256, 128) policy inference per tick, no learning, one thread. The trainer's figure
is the sampling phase of a real `SerialTrainer` run (controllers, fragments and all), timed
without its learning phase. Both run the trainer's current network on the same environments,
alternating batch by batch, and the medians of the repetitions are compared.

    python benchmarks/scale/raw_bound.py [--frames 40000] [--num-envs 8] [--repeats 3]

Prints a Markdown table and writes benchmarks/results/raw_bound.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(variable, "1")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks import common  # noqa: E402
from lamarckian_hpc.config import RunConfig  # noqa: E402
from lamarckian_hpc.models import ActorCritic  # noqa: E402
from lamarckian_hpc.runtime import TrainResult, UpdateReport  # noqa: E402
from lamarckian_hpc.runtime.runners.trainer import SerialTrainer  # noqa: E402

ENVIRONMENTS = ("CartPole-v1", "Pendulum-v1")
RESULTS = Path(__file__).resolve().parents[1] / "results" / "raw_bound.json"


def run_config(env_id: str, num_envs: int, frames: int) -> RunConfig:
    return RunConfig.model_validate({
        "env": {"id": env_id, "num_envs": num_envs},
        "model": {"policy_hidden_sizes": [256, 128]},
        "algorithm": {"batch_size": 2048, "num_epochs": 1, "num_minibatches": 1},
        "runtime": {"device": "cpu", "torch_threads": 1},
        "stop": {"total_env_steps": frames},
    })


class RawLoop:
    """K envs, one batched inference per tick, no learning, no bookkeeping: the bound."""

    def __init__(self, config: RunConfig, model: ActorCritic) -> None:
        self.model = model
        self.envs = [gym.make(config.env.id) for _ in range(config.env.num_envs)]
        self.observations = [env.reset(seed=1000 + index)[0] for index, env in enumerate(self.envs)]
        space = self.envs[0].action_space
        self.box = isinstance(space, gym.spaces.Box)
        self.low, self.high = (space.low, space.high) if self.box else (None, None)

    def run(self, frames: int) -> float:
        """Step `frames` env frames; return the seconds it took."""
        envs, observations, box, low, high = self.envs, self.observations, self.box, self.low, self.high
        steps = 0
        start = time.perf_counter()
        while steps < frames:
            with torch.inference_mode():
                actions, _ = self.model.act(torch.from_numpy(np.stack(observations).astype(np.float32)))
            # The same conversions the sampler makes: Python ints for discrete actions, rows otherwise.
            actions = list(actions.numpy()) if box else actions.tolist()
            for index, env in enumerate(envs):
                action = np.minimum(np.maximum(actions[index], low), high) if box else actions[index]
                observation, _, terminated, truncated, _ = env.step(action)
                observations[index] = env.reset()[0] if terminated or truncated else observation
            steps += len(envs)
        return time.perf_counter() - start


class Interleaved:
    """Observer that runs a raw burst of one batch after each of the trainer's updates.

    Raw bursts and the trainer's sampling phases alternate batch by batch, with the trainer's
    current weights, so slow and fast spells of a shared machine fall on both alike.
    """

    def __init__(self, raw: RawLoop) -> None:
        self.raw = raw
        self.raw_frames, self.raw_seconds = 0, 0.0
        self.trainer_frames, self.trainer_seconds = 0, 0.0

    def on_update_end(self, report: UpdateReport) -> None:
        frames = report.env_frames - self.trainer_frames
        self.trainer_frames += frames
        self.trainer_seconds += frames / report.metrics["env_frames_per_second"]
        self.raw_seconds += self.raw.run(frames)
        self.raw_frames += frames

    def on_train_end(self, result: TrainResult) -> None:
        pass


def measure(config: RunConfig) -> tuple[float, float]:
    """(raw steps/s, trainer sampling steps/s), interleaved batch by batch."""
    trainer = SerialTrainer(config)
    observer = Interleaved(RawLoop(config, trainer.learner.model))  # the learner is on the CPU here
    trainer.observers.append(observer)
    try:
        trainer.train()
    finally:
        trainer.close()
    return observer.raw_frames / observer.raw_seconds, observer.trainer_frames / observer.trainer_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=40_000, help="env frames per measurement")
    parser.add_argument("--num-envs", type=int, default=8, help="environments per process (K)")
    parser.add_argument("--repeats", type=int, default=3, help="alternating repetitions; medians are compared")
    parser.add_argument("--output", type=Path, default=RESULTS)
    common.add_common_args(parser)
    args = parser.parse_args()

    rows = []
    for env_id in ENVIRONMENTS:
        config = run_config(env_id, args.num_envs, args.frames)
        raw, ours = [], []
        for _ in range(args.repeats):
            raw_rate, trainer_rate = measure(config)
            raw.append(raw_rate)
            ours.append(trainer_rate)
        raw_median, ours_median = statistics.median(raw), statistics.median(ours)
        rows.append({"env": env_id, "num_envs": args.num_envs, "frames": args.frames,
                     "raw_steps_per_second": raw, "trainer_sampling_steps_per_second": ours,
                     "raw_median": raw_median, "trainer_median": ours_median,
                     "ratio": ours_median / raw_median})

    print("| env | K | raw bound (steps/s) | trainer sampling (steps/s) | ratio |")
    print("|---|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['env']} | {row['num_envs']} | {row['raw_median']:,.0f} | {row['trainer_median']:,.0f} | "
              f"{row['ratio']:.2f} |")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    common.write_results(args.output, {
        "torch": torch.__version__,
        "results": rows,
    }, args.label)
    print(f"\nwritten: {args.output}")


if __name__ == "__main__":
    main()
