"""What the live TensorBoard sink (`storage.tensorboard`) costs a training run: env steps/s with and
without it, and the time the sink itself takes.

Each run is a whole training run of CartPole with the ours-side settings of `benchmarks/peers/vs_rllib.py`
(the distributed runtime with 2 actors of 8 envs, a shared (256, 128) tanh trunk, batches of 4,096
steps, one epoch of 8 minibatches, Adam 3e-4), for `--frames` env frames without a target, writing
its run file as `lamarckian-hpc train` does; the sink flushes at the default metrics interval (5 s).
A run's rate is its frames over its wall time. The two settings alternate, first one then the other,
in each of `--repeats` rounds; the table gives medians. On a shared machine whole runs' rates vary by
more than the sink costs, so the sink's own time is measured too: the seconds spent in its
`on_update_end` and `close` (adding the update's scalars, flushing and syncing the event file),
as a share of the run's wall time, which the machine's load hardly moves.

    python benchmarks/costs/tensorboard_sink.py [--frames 200000] [--repeats 3]

Prints a Markdown table and writes benchmarks/results/tensorboard_sink.json.
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

import lamarckian_hpc.runtime.sinks.tensorboard as tensorboard_sink
from benchmarks import common
from lamarckian_hpc.config import load_config
from lamarckian_hpc.runtime.runners.training_run import run_training

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).resolve().parents[1] / "results" / "tensorboard_sink.json"
CONFIG = ROOT / "configs" / "ppo_cartpole.yaml"
#: vs_rllib.py's CartPole settings for our side (CLASSIC, SHARED_MLP, 2 workers of 8 envs).
VS_RLLIB = ["runtime.mode=ray", "runtime.num_actors=2", "runtime.torch_threads=1", "env.num_envs=8",
            "model.policy_hidden_sizes=[256, 128]", "model.activation=tanh", "model.share_trunk=true",
            "algorithm.batch_size=4096", "algorithm.num_minibatches=8", "algorithm.num_epochs=1",
            "algorithm.learning_rate=0.0003", "stop.target_return=null", "storage.checkpoint_interval_seconds=null"]
SETTINGS = ("without", "with")


class SinkClock:
    """The seconds spent inside the sink's methods (wrapped for the benchmark's process)."""

    seconds = 0.0
    calls = 0

    @classmethod
    def install(cls) -> None:
        sink = tensorboard_sink.TensorBoardSink
        for name in ("on_update_end", "close"):
            method = getattr(sink, name)

            def timed(self: Any, *args: Any, _method: Any = method) -> None:
                started = time.perf_counter()
                try:
                    _method(self, *args)
                finally:
                    cls.seconds += time.perf_counter() - started
                    cls.calls += 1

            setattr(sink, name, timed)


def _one_run(setting: str, frames: int, folder: Path, name: str) -> dict[str, Any]:
    overrides = [*VS_RLLIB, f"stop.total_env_steps={frames}", f"storage.directory={folder}", f"storage.run_name={name}"]
    if setting == "with":
        overrides.append(f"storage.tensorboard={folder / 'tb'}")
    config = load_config(CONFIG, overrides)
    SinkClock.seconds, SinkClock.calls = 0.0, 0
    result = run_training(config, folder / f"{name}.h5")
    events = sorted((folder / "tb" / name).glob("events.*")) if setting == "with" else []
    return {"env_steps_per_second": result.env_frames / result.wall_time_seconds, "updates": result.updates,
            "wall_seconds": result.wall_time_seconds, "sink_seconds": SinkClock.seconds, "sink_calls": SinkClock.calls,
            "event_bytes": sum(path.stat().st_size for path in events)}


def measure(frames: int, repeats: int) -> list[dict[str, Any]]:
    samples: dict[str, list[dict[str, Any]]] = {setting: [] for setting in SETTINGS}
    with tempfile.TemporaryDirectory() as folder:
        for repeat in range(repeats):
            for setting in SETTINGS:
                sample = _one_run(setting, frames, Path(folder), f"{setting}-{repeat}")
                samples[setting].append(sample)
                print(f"[{repeat + 1}/{repeats}] {setting} the sink: {sample['env_steps_per_second']:,.0f} env steps/s, "
                      f"sink {sample['sink_seconds'] * 1e3:.1f} ms in {sample['sink_calls']} calls "
                      f"(load {os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)

    def median(setting: str, key: str) -> float:
        return statistics.median(sample[key] for sample in samples[setting])

    base = median("without", "env_steps_per_second")
    return [{"sink": setting, "repeats": repeats, "env_steps_per_second": round(median(setting, "env_steps_per_second")),
             "cost_percent": round(100 * (1 - median(setting, "env_steps_per_second") / base), 1),
             "updates": median(setting, "updates"),
             "sink_ms_per_update": round(1e3 * median(setting, "sink_seconds") / max(1, median(setting, "updates")), 3),
             "sink_share_percent": round(100 * statistics.median(s["sink_seconds"] / s["wall_seconds"]
                                                                 for s in samples[setting]), 3),
             "event_kib": round(median(setting, "event_bytes") / 1024, 1),
             "rates": [round(s["env_steps_per_second"]) for s in samples[setting]]} for setting in SETTINGS]


def _table(rows: list[dict[str, Any]]) -> str:
    lines = ["| TensorBoard sink | env steps/s (median) | vs without | sink ms per update | sink share of wall time "
             "| event file | runs |", "|---|---:|---:|---:|---:|---:|---|"]
    for row in rows:
        lines.append(f"| {row['sink']} | {row['env_steps_per_second']:,} | {-row['cost_percent']:+.1f}% "
                     f"| {row['sink_ms_per_update']} | {row['sink_share_percent']}% | {row['event_kib']} KiB "
                     f"| {', '.join(f'{rate:,}' for rate in row['rates'])} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=200_000, help="env frames per run")
    parser.add_argument("--repeats", type=int, default=3, help="rounds of both settings; medians shown")
    parser.add_argument("--output", type=Path, default=RESULTS)
    common.add_common_args(parser)
    args = parser.parse_args()
    SinkClock.install()
    rows = measure(args.frames, args.repeats)
    print(_table(rows))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    common.write_results(args.output, {
        "frames": args.frames,
        "settings": VS_RLLIB, "results": rows}, args.label)


if __name__ == "__main__":
    main()
