"""What recording episodes into the run file costs: env steps/s with recording off, at the default
rate and for every episode, one after the other in one run; and the codecs of the step datasets.

Each run is a whole training run of CartPole (configs/ppo_cartpole.yaml, 8 envs, PPO, with the
sampling-bound batch settings of `benchmarks/peers/vs_rllib.py`: batches of 4,096 steps, one epoch of 8
minibatches, so that what recording costs the sampling is not hidden behind learning) for
`--frames` env frames without a target. A run's rate is its frames over its wall time (sampling,
learning and writing together); for the serial runtime the table also gives the rate of its
sampling phases alone, where the controllers keep the recorded steps. The serial runtime is
deterministic for a seed: its three settings play exactly the same episodes, so their difference
is the recording alone. The distributed runtime (`--runtimes ray`, 2 actors) adds the actors' side
(episodes kept, sent and decoded). The settings run in a rotated order in each of `--repeats`
rounds, so that neither a change of the machine's load nor being first in a round favours one;
the table gives medians.

The actor-side table times what one actor does for each rollout, in this process and without a
learner: sample 1,024 steps (8 envs, the torch-free policy), take the batch and the finished
episodes, build the experience message with the recorded episodes and encode it for the wire;
`--actor-repeats` rounds of `--actor-steps` steps per setting, rotated as above, in steps per
second of this process's CPU time: with no learner and no other process counted, its figures vary
far less than whole runs' wall-time rates on a shared machine do.

The codec table writes 20,000 rows of CartPole observations (float32, 4 values) and of image-Pong
frames (uint8, 4x84x84, random actions; needs the atari extra, skipped without it) into chunked
datasets as the run file does, with each filter, and gives bytes and write speed.

    python benchmarks/costs/trajectory_cost.py [--frames 200000] [--repeats 3] [--runtimes serial ray]

Prints Markdown tables and writes benchmarks/results/trajectory_cost.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from benchmarks import common
from lamarckian_hpc.comm.wire import encode
from lamarckian_hpc.config import load_config
from lamarckian_hpc.mdp import make_gym_env
from lamarckian_hpc.runtime.actor.sides import make_sampling_side
from lamarckian_hpc.runtime.messages import experience_message
from lamarckian_hpc.runtime.runners.training_run import run_training
from lamarckian_hpc.storage import FILE_FORMAT, open_run
from lamarckian_hpc.storage.trajectories import CHUNK_BYTES, MAX_CHUNK_ROWS

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).resolve().parents[1] / "results" / "trajectory_cost.json"
CONFIG = ROOT / "configs" / "ppo_cartpole.yaml"
#: Label, storage.trajectories.every_episodes.
SETTINGS = (("off", 0), ("default (1 in 100)", 100), ("every episode", 1))
CODECS = (("none", None, None), ("lzf", "lzf", None), ("gzip-1", "gzip", 1), ("gzip-4", "gzip", 4))
CODEC_ROWS = 20_000
ROLLOUT_STEPS = 1024
BATCH = ["algorithm.batch_size=4096", "algorithm.num_epochs=1", "algorithm.num_minibatches=8"]


def _one_run(runtime: str, every: int, frames: int, folder: Path, name: str) -> dict[str, Any]:
    overrides = [f"runtime.mode={runtime}", f"stop.total_env_steps={frames}", "stop.target_return=null", *BATCH,
                 f"storage.trajectories.every_episodes={every}", f"storage.directory={folder}",
                 f"storage.run_name={name}", "storage.checkpoint_interval_seconds=null"]
    if runtime == "ray":
        overrides.append("runtime.num_actors=2")
    config = load_config(CONFIG, overrides)
    started = time.monotonic()
    result = run_training(config, folder / f"{name}.h5")
    seconds = time.monotonic() - started
    with open_run(folder / f"{name}.h5") as run:
        recorded = len(run.episodes()["episode"]) if run.trajectory_policies() else 0
    size = (folder / f"{name}.h5").stat().st_size
    return {"env_steps_per_second": result.env_frames / result.wall_time_seconds, "seconds": seconds,
            "sampling_steps_per_second": result.sampling_frames_per_second,
            "episodes": result.episodes, "recorded": recorded, "file_mib": size / 2**20}


def measure_runs(runtimes: list[str], frames: int, repeats: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as folder:
        for runtime in runtimes:
            samples: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in SETTINGS}
            for repeat in range(repeats):
                for label, every in SETTINGS[repeat % 3:] + SETTINGS[:repeat % 3]:
                    sample = _one_run(runtime, every, frames, Path(folder), f"{runtime}-{every}-{repeat}")
                    samples[label].append(sample)
                    print(f"[{runtime} {repeat + 1}/{repeats}] {label}: {sample['env_steps_per_second']:,.0f} "
                          f"env steps/s, {sample['recorded']} of {sample['episodes']} episodes recorded",
                          file=sys.stderr, flush=True)
            def median(label: str, key: str, samples: dict = samples) -> float:
                return statistics.median(sample[key] for sample in samples[label])

            for label, every in SETTINGS:
                rate, sampling = median(label, "env_steps_per_second"), median(label, "sampling_steps_per_second")
                serial = {"sampling_steps_per_second": round(sampling),
                          "sampling_cost_percent": round(100 * (1 - sampling / median("off", "sampling_steps_per_second")),
                                                         1)} if runtime == "serial" else {}
                rows.append({"runtime": runtime, "recording": label, "every_episodes": every, "repeats": repeats,
                             "env_steps_per_second": round(rate),
                             "cost_percent": round(100 * (1 - rate / median("off", "env_steps_per_second")), 1),
                             **serial,
                             "episodes_recorded": statistics.median(s["recorded"] for s in samples[label]),
                             "episodes": statistics.median(s["episodes"] for s in samples[label]),
                             "file_mib": round(statistics.median(s["file_mib"] for s in samples[label]), 2)})
    return rows


def _actor_rate(every: int, steps: int) -> float:
    config = load_config(CONFIG, [f"storage.trajectories.every_episodes={every}"])
    side = make_sampling_side(config, seed=1)
    sent = 0
    try:
        started = time.process_time()
        while sent < steps:
            side.sample(ROLLOUT_STEPS)
            batch = side.experience.take()
            completed = side.sampler.take_completed()
            recorded = tuple((index, result.recorded) for index, result in enumerate(completed) if result.recorded)
            message = experience_message(0, batch, np.array([r.episode_return for r in completed]),
                                         np.array([r.length for r in completed]), len(batch), recorded=recorded)
            encode(message)
            sent += len(batch)
        return sent / (time.process_time() - started)
    finally:
        side.close()


def measure_actor_side(steps: int, repeats: int) -> list[dict[str, Any]]:
    samples: dict[str, list[float]] = {label: [] for label, _ in SETTINGS}
    for repeat in range(repeats):
        for label, every in SETTINGS[repeat % 3:] + SETTINGS[:repeat % 3]:
            samples[label].append(_actor_rate(every, steps))
    base = statistics.median(samples["off"])
    return [{"recording": label, "every_episodes": every, "repeats": repeats,
             "steps_per_cpu_second": round(statistics.median(samples[label])),
             "cost_percent": round(100 * (1 - statistics.median(samples[label]) / base), 1),
             "min": round(min(samples[label])), "max": round(max(samples[label]))}
            for label, every in SETTINGS]


def _observations(env_id: str, rows: int) -> np.ndarray:
    env = make_gym_env(env_id)
    observation, _ = env.reset(seed=0)
    out = [observation]
    while len(out) < rows:
        observation, _, terminated, truncated, _ = env.step(env.action_space.sample())
        out.append(observation)
        if terminated or truncated:
            observation, _ = env.reset()
    env.close()
    data = np.array(out)
    return data if data.dtype == np.uint8 else data.astype(np.float32)


def measure_codecs() -> list[dict[str, Any]]:
    sources = [("CartPole-v1", "float32 (4,)")]
    try:
        import ale_py  # noqa: F401

        sources.append(("lamarckian/PongImage-v0", "uint8 (4, 84, 84)"))
    except ImportError:
        print("image Pong skipped: the atari extra is not installed", file=sys.stderr)
    rows = []
    for env_id, kind in sources:
        data = _observations(env_id, CODEC_ROWS)
        chunk_rows = max(1, min(MAX_CHUNK_ROWS, CHUNK_BYTES // data[0].nbytes))
        for label, compression, level in CODECS:
            with tempfile.TemporaryDirectory() as folder:
                path = os.path.join(folder, "codec.h5")
                with h5py.File(path, "w", libver=FILE_FORMAT) as file:
                    dataset = file.create_dataset("observations", shape=(0, *data.shape[1:]), dtype=data.dtype,
                                                  maxshape=(None, *data.shape[1:]), chunks=(chunk_rows, *data.shape[1:]),
                                                  compression=compression, compression_opts=level)
                    started = time.perf_counter()
                    for first in range(0, len(data), 500):  # a flush's worth of rows at a time
                        part = data[first:first + 500]
                        dataset.resize((dataset.shape[0] + len(part), *data.shape[1:]))
                        dataset[-len(part):] = part
                    file.flush()
                    seconds = time.perf_counter() - started
                size = os.path.getsize(path)
            rows.append({"observations": f"{env_id} {kind}", "codec": label, "raw_mib": round(data.nbytes / 2**20, 2),
                         "file_mib": round(size / 2**20, 2), "ratio": round(data.nbytes / size, 1),
                         "write_mib_per_second": round(data.nbytes / 2**20 / seconds)})
    return rows


def _table(rows: list[dict[str, Any]]) -> str:
    names = list(dict.fromkeys(name for row in rows for name in row))
    lines = ["| " + " | ".join(names) + " |", "|" + "---|" * len(names)]
    lines += ["| " + " | ".join(f"{row[name]:,}" if isinstance(row.get(name), (int, float)) else str(row.get(name, ""))
                                for name in names) + " |" for row in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=200_000, help="env frames of each run")
    parser.add_argument("--repeats", type=int, default=3, help="rounds of the three settings")
    parser.add_argument("--runtimes", nargs="+", default=["serial", "ray"], choices=["serial", "ray"])
    parser.add_argument("--actor-steps", type=int, default=200_000, help="steps of each actor-side round")
    parser.add_argument("--actor-repeats", type=int, default=7, help="rounds of the actor-side table")
    parser.add_argument("--out", type=Path, default=RESULTS)
    common.add_common_args(parser)
    args = parser.parse_args()
    codecs = measure_codecs()
    print(_table(codecs), flush=True)
    actor_side = measure_actor_side(args.actor_steps, args.actor_repeats)
    print(_table(actor_side), flush=True)
    results = measure_runs(args.runtimes, args.frames, args.repeats)
    print(_table(results))
    record = {"config": CONFIG.name, "frames": args.frames, "results": results, "actor_side": actor_side,
              "codecs": codecs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    common.write_results(args.out, record, args.label)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
