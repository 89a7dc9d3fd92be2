"""Trained env steps per second against the number of learner ranks of one policy, on the test cluster.

Each point is a real `lamarckian-hpc launch` on `--nodes` nodes of a running Slurm cluster (the
one-machine test cluster: nodes in network namespaces of their own, each node's actors on its own
CPU quota), with the same actors for every point and `runtime.learners` 1, 2, 4 (one rank per
node: `runtime.learner_placement: spread`). So that each rank, too, has cores of its own, as a
learner on its own host would: rank 0 runs in the test cluster's learner group
(`TESTCLUSTER_LEARNER_CPUS`), and this script gives each rank 1.. a cgroup of `--rank-cpus` cores
(`cpu_groups.CpuGroup`, `lhs-rankK`) and moves the rank's process into it as soon as it appears.

The workloads are learner-bound on purpose (the learner, not the actors, is the ceiling):

- `cartpole`: PPO on CartPole with the (256, 128) model of `vs_rllib.py`, batches of 4096 in 8
  minibatches, 4 epochs;
- `pong-image`: `configs/ppo_pong_image_cpu.yaml`, image Pong with DQN's CNN (needs the atari extra),
  batches of 1024 in 8 minibatches of 128, 2 epochs: two passes make each env frame cost the
  learner twice, so that the actors of a small machine keep 4 ranks busy.

Figures come from the run file alone, leaving out the first `--skip` updates: trained env steps per
second (the median over updates of `trained_frames_per_second`, every rank's steps), env steps per
second received, staleness (mean of the per-update means, and the largest), and the milliseconds
rank 0 spends in the group's collectives per update (`learner_collective_ms`: the gradients'
all-reduce and the runtime's agreement, waiting for slower ranks included); the speed-up is against
one rank of the same workload.

By default every point trains the workload's global batch, split over the ranks (strong scaling:
N ranks make the update one learner makes, with 1/N of each minibatch each). With
`--batch-per-rank` the global batch grows with the ranks instead (weak scaling, as RLlib's
`train_batch_size_per_learner` and DD-PPO's per-worker rollouts): N ranks train N times the
workload's batch in the same number of minibatches, so each rank's minibatch step computes as many
rows as one learner's, and the all-reduce, whose cost does not shrink with the rows, is paid once
per as much compute at any rank count.

Run it under the machine's test-cluster lock, on a cluster started with quotas, e.g.:

    flock -o /tmp/testcluster.lock -c 'TESTCLUSTER_NODE_CPUS=0.15 TESTCLUSTER_CPU_QUOTA_SCOPE=actors \\
        TESTCLUSTER_LEARNER_CPUS=0.175 TESTCLUSTER_CPU_PERIOD_US=10000 TESTCLUSTER_CPU_SHARES=8192 \\
        slurm/testcluster/start.sh 4 && . /var/tmp/lamarckian-testcluster/env && \\
        python benchmarks/scale/learner_scaling.py --workloads cartpole --ranks 1 2 4 --rank-cpus 0.175; slurm/testcluster/stop.sh'

Fractional-core quotas make ranks in lockstep wait for each other at every all-reduce (see
docs/benchmarks/learner_scaling.md and allreduce_under_quota.py): on one small machine the figures
show the runtime's costs under quotas, not what whole-core hosts give.

With `--local` each point is a `lamarckian-hpc train` on this host's own Ray instead, without
quotas: every rank and actor shares this machine's cores, so its figures are what the ranks cost
(collectives, staleness), not how they scale.

Prints a Markdown table and writes benchmarks/results/learner_scaling.json (or `--output`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import psutil

from benchmarks import common
from benchmarks.scale.cpu_groups import CpuGroup

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

RESULTS = HERE.parent / "results" / "learner_scaling.json"
WORKLOADS: dict[str, tuple[Path, list[str]]] = {
    "cartpole": (ROOT / "configs" / "ppo_cartpole.yaml",
                 ["env.num_envs=8", "model.policy_hidden_sizes=[256,128]", "model.critic_hidden_sizes=[]",
                  "model.share_trunk=true", "algorithm.num_minibatches=8",
                  "algorithm.num_epochs=4", "algorithm.learning_rate=0.00025"]),
    "pong-image": (ROOT / "configs" / "ppo_pong_image_cpu.yaml",
                   ["algorithm.num_minibatches=8", "algorithm.num_epochs=2"]),
    # The project's CartPole config as it is, for learning curves (`--target-return 475`).
    "cartpole-default": (ROOT / "configs" / "ppo_cartpole.yaml", []),
}
#: The global batch of every workload (env steps per update; per rank with --batch-per-rank).
BATCH_STEPS: dict[str, int] = {"cartpole": 4096, "pong-image": 1024, "cartpole-default": 512}


def _metric(file: h5py.File, name: str) -> np.ndarray:
    return file["metrics"][name]["value"][()]


def read_run(path: Path, skip: int, batch_steps: float = 4096.0, target: float | None = None) -> dict[str, Any]:
    """The figures of one run file (see the module's docstring)."""
    with h5py.File(path, "r", swmr=True, locking=False) as file:
        trained = _metric(file, "trained_frames_per_second")
        staleness, largest = _metric(file, "staleness_mean"), _metric(file, "staleness_max")
        collective = _metric(file, "learner_collective_ms")
        agree_ms, update_ms = _metric(file, "learner_agree_ms"), _metric(file, "learner_update_ms")
        group = file["metrics"]["staleness_mean"]
        frames, wall = group["env_frames"][()], group["wall_time"][()]
        returns = file["metrics"]["episode_return_mean"]
        return_values, return_frames = returns["value"][()], returns["env_frames"][()]
        return_wall = returns["wall_time"][()]
    if len(trained) <= skip + 1:
        raise RuntimeError(f"{path}: only {len(trained)} updates, fewer than --skip {skip} + 2")
    kept = slice(skip, None)
    return {"updates": float(len(trained)), "trained_steps_per_second": float(np.median(trained[kept])),
            "env_steps_per_second": float((frames[-1] - frames[skip]) / (wall[-1] - wall[skip])),
            "staleness_mean": float(np.nanmean(staleness[kept])), "staleness_max": float(np.nanmax(largest[kept])),
            "collective_ms": float(np.mean(collective[kept])),
            # The first collective (waiting for every rank's shard) apart from the rest, and the update
            # itself (its gradients' all-reduces included): the update's compute is about
            # update_compute_ms - allreduce_ms.
            "agree_ms": float(np.mean(agree_ms[kept])),
            "allreduce_ms": float(np.mean(collective[kept] - agree_ms[kept])),
            "update_compute_ms": float(np.mean(update_ms[kept])),
            # The wall time of an update (gathering the shard, the update, the collectives), from its
            # trained steps per second: what the collectives' milliseconds are a share of.
            "update_ms": float(np.median(batch_steps / trained[kept]) * 1e3),
            "return_final": float(return_values[-1]) if len(return_values) else float("nan"),
            "env_frames": float(frames[-1]), "wall_seconds": float(wall[-1]),
            **_reached(return_values, return_frames, return_wall, target)}


def _reached(values: np.ndarray, frames: np.ndarray, wall: np.ndarray, target: float | None) -> dict[str, Any]:
    """Env frames and seconds at the first update whose recent-episodes mean return is at least `target`."""
    if target is None:
        return {}
    hits = np.flatnonzero(values >= target)
    if not len(hits):
        return {"target_return": target, "reached": False}
    return {"target_return": target, "reached": True, "frames_to_target": float(frames[hits[0]]),
            "seconds_to_target": float(wall[hits[0]])}


def cluster_groups() -> dict[str, Path]:
    """The test cluster's CPU groups (lhtc-nodeK, lhtc-learner) that exist now."""
    root = Path(os.environ.get("TESTCLUSTER_CPU_CGROUP_ROOT", "/sys/fs/cgroup/cpu"))
    return {path.name: path for path in sorted(root.glob("lhtc-*")) if (path / "cpu.stat").exists()}


def read_stat(path: Path) -> dict[str, int]:
    lines = (path / "cpu.stat").read_text().split("\n")
    stat = {key: int(value) for key, value in (line.split() for line in lines if line)}
    return stat


def quota_use(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> dict[str, Any]:
    """Per group over a run: the share of CFS periods in which its quota throttled it (near 1: the
    quota was its ceiling) and the seconds it was throttled."""
    out = {}
    for name in sorted(set(before) & set(after)):
        periods = after[name]["nr_periods"] - before[name]["nr_periods"]
        out[name] = {"throttled_share": round((after[name]["nr_throttled"] - before[name]["nr_throttled"]) / periods, 3)
                     if periods else 0.0,
                     "throttled_seconds": round((after[name]["throttled_time"] - before[name]["throttled_time"]) / 1e9, 2)}
    return out


class RankMover:
    """Moves each learner rank 1.. process (`ray::LearnerRank`) into a CPU group of its own."""

    def __init__(self, groups: list[CpuGroup]) -> None:
        self.stats: dict[str, dict[str, int]] = {}
        self.groups, self.placed = groups, {}
        self.before = {p.pid for p in self._ranks()}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    @staticmethod
    def _ranks() -> list[psutil.Process]:
        found = []
        for process in psutil.process_iter(["cmdline"]):
            cmdline = process.info.get("cmdline") or []
            if cmdline and cmdline[0].startswith("ray::LearnerRank"):
                found.append(process)
        return found

    def _run(self) -> None:
        while not self.stop.wait(0.2):
            # A rank joins its node's CPU group when it starts (`cpu_quota.join_cpu_group`), possibly
            # after it was moved here: put every placed rank back into its own group each time.
            groups = {group.name: group for group in self.groups}
            for pid, name in self.placed.items():
                try:
                    (groups[name].path / "cgroup.procs").write_text(f"{pid}\n")
                except OSError:
                    pass
            for process in self._ranks():
                if process.pid in self.before or process.pid in self.placed or len(self.placed) >= len(self.groups):
                    continue
                group = self.groups[len(self.placed)]
                try:
                    (group.path / "cgroup.procs").write_text(f"{process.pid}\n")
                    self.placed[process.pid] = group.name
                    self.stats[group.path.name] = read_stat(group.path)
                except OSError:
                    pass

    def finish(self) -> dict[int, str]:
        self.stop.set()
        self.thread.join()
        return dict(self.placed)

    def stats_now(self) -> dict[str, dict[str, int]]:
        """cpu.stat of the groups a rank was moved into, now (before they are removed)."""
        return {group.path.name: read_stat(group.path) for group in self.groups if group.path.name in self.stats}


def batch_of(workload: str, ranks: int, per_rank: bool) -> int:
    """The global batch of a point: the workload's, or with `--batch-per-rank` that many per rank."""
    return BATCH_STEPS[workload] * (ranks if per_rank else 1)


def launch(workload: str, ranks: int, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    config, settings = WORKLOADS[workload]
    batch = batch_of(workload, ranks, args.batch_per_rank)
    name = f"{workload}-{ranks}"
    where = (["train", str(config)] if args.local else
             ["launch", str(config), "--nodes", str(args.nodes), "--cpus-per-node", str(args.cpus_per_node),
              "--folder", str(folder / f"{name}-job")])
    command = [sys.executable, "-m", "lamarckian_hpc.cli", *where,
               *settings, f"algorithm.batch_size={batch}", f"runtime.learners={ranks}", f"runtime.num_actors={args.actors}",
               f"stop.max_wall_seconds={args.seconds}",
               f"stop.target_return={'null' if args.target_return is None else args.target_return}",
               "stop.total_env_steps=1000000000",
               f"storage.directory={folder}", f"storage.run_name={name}"]
    groups = [CpuGroup(f"rank{rank}", args.rank_cpus) for rank in range(1, ranks)] if args.rank_cpus else []
    for group in groups:
        group.create()
    mover = RankMover(groups)
    started = time.monotonic()
    stats_before = {name: read_stat(path) for name, path in cluster_groups().items()}
    try:
        done = subprocess.run(command, env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
                              cwd=ROOT, capture_output=True, text=True, timeout=args.seconds + 900)
    finally:
        placed = mover.finish()
        stats_after = {name: read_stat(path) for name, path in cluster_groups().items()}
        stats_before.update(mover.stats)
        stats_after.update(mover.stats_now())
        for group in groups:
            group.remove()
    if done.returncode != 0:
        raise RuntimeError(f"{name} failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-3000:]}")
    row = {"workload": workload, "ranks": ranks, "batch_size": batch, "seconds_wall": time.monotonic() - started,
           "ranks_in_own_group": len(placed), "load_average": os.getloadavg(),
           "quota_use": quota_use(stats_before, stats_after),
           **read_run(folder / f"{name}.h5", args.skip, float(batch), args.target_return)}
    reached = (f", return {row['return_final']:.0f}" +
               (f" ({row['target_return']:.0f} at {row['frames_to_target']:,.0f} frames, {row['seconds_to_target']:.0f} s)"
                if row.get("reached") else "")) if args.target_return is not None else ""
    print(f"  {name}: {row['trained_steps_per_second']:,.0f} trained steps/s, collectives {row['collective_ms']:.1f} "
          f"(agreement {row['agree_ms']:.1f}), learner.update {row['update_compute_ms']:.0f} "
          f"of {row['update_ms']:.0f} ms per update{reached}, load {row['load_average'][0]:.1f}; "
          f"throttled share {json.dumps({k: v['throttled_share'] for k, v in row['quota_use'].items()})}", flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--workloads", nargs="+", choices=sorted(WORKLOADS), default=["cartpole", "pong-image"])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--cpus-per-node", type=int, default=2)
    parser.add_argument("--actors", type=int, default=8, help="actors of every point, over the nodes")
    parser.add_argument("--rank-cpus", type=float, help="cores of each rank 1.. (a CPU group each); none: no quota")
    parser.add_argument("--seconds", type=float, default=60.0, help="training seconds per point")
    parser.add_argument("--skip", type=int, default=3, help="updates left out at the start")
    parser.add_argument("--local", action="store_true",
                        help="train on this host's own Ray instead (no cluster, no quotas: every rank and actor "
                             "shares this machine's cores, so the figures are the runtime's costs, not scaling)")
    parser.add_argument("--target-return", type=float,
                        help="stop each point once the recent episodes' mean return reaches this (e.g. 475 for "
                             "CartPole) and report the env frames and seconds it took; none: train --seconds")
    parser.add_argument("--batch-per-rank", action="store_true",
                        help="grow the global batch with the ranks (the workload's batch per rank, same number of "
                             "minibatches: weak scaling); default: the workload's batch split over the ranks")
    parser.add_argument("--output", type=Path, default=RESULTS)
    common.add_common_args(parser)
    args = parser.parse_args(argv)
    if not args.local and "SLURM_CONF" not in os.environ:
        raise SystemExit("learner_scaling.py needs a running Slurm cluster: source /var/tmp/lamarckian-testcluster/env")
    rows: list[dict[str, Any]] = []
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="learner-scaling-") as folder:
        for workload in args.workloads:
            for ranks in args.ranks:
                try:
                    rows.append(launch(workload, ranks, args, Path(folder)))
                except (RuntimeError, subprocess.TimeoutExpired) as error:
                    failures.append(f"{workload} with {ranks} ranks: {str(error).strip().splitlines()[0]}")
                    print(f"  {failures[-1]}", flush=True)
    base = {row["workload"]: row["trained_steps_per_second"] for row in rows if row["ranks"] == 1}
    print("\n| workload | ranks | trained env steps/s | speed-up | env steps/s received | staleness mean | "
          "staleness max | collectives ms/update | of which agreement | learner.update ms | update wall ms | load |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        speedup = row["trained_steps_per_second"] / base[row["workload"]] if row["workload"] in base else float("nan")
        row["speedup"] = speedup
        print(f"| {row['workload']} | {row['ranks']} | {row['trained_steps_per_second']:,.0f} | {speedup:.2f}x | "
              f"{row['env_steps_per_second']:,.0f} | {row['staleness_mean']:.2f} | {row['staleness_max']:.0f} | "
              f"{row['collective_ms']:.1f} | {row['agree_ms']:.1f} | {row['update_compute_ms']:.0f} | {row['update_ms']:.0f} | "
              f"{row['load_average'][0]:.1f} |")
    for failure in failures:
        print(f"- not measured: {failure}")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    common.write_results(args.output, {
        "local": args.local, "nodes": 1 if args.local else args.nodes,
        "cpus_per_node": os.cpu_count() if args.local else args.cpus_per_node, "actors": args.actors, "rank_cpus": args.rank_cpus,
        "node_cpus": os.environ.get("TESTCLUSTER_NODE_CPUS"), "learner_cpus": os.environ.get("TESTCLUSTER_LEARNER_CPUS"),
        "cpu_quota_scope": os.environ.get("TESTCLUSTER_CPU_QUOTA_SCOPE"),
        "cpu_period_us": os.environ.get("TESTCLUSTER_CPU_PERIOD_US"), "cpu_shares": os.environ.get("TESTCLUSTER_CPU_SHARES"),
        "target_return": args.target_return, "batch_per_rank": args.batch_per_rank,
        "seconds": args.seconds, "skip": args.skip, "settings": {name: WORKLOADS[name][1] for name in args.workloads},
        "machine": {"platform": platform.platform()},
        "rows": rows, "failures": failures}, args.label)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
