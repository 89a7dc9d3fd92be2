"""A `lamarckian-hpc launch` of PPO on CartPole on the Slurm test cluster (slurm/testcluster), as
the benchmarks that inject faults into a whole job run it (benchmarks/reliability/node_loss.py,
benchmarks/reliability/chaos.py): the launch in a subprocess with its output timestamped, the wait for the run
to be well under way, and the end of the job with what a lost node left behind.
"""

from __future__ import annotations

import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

from benchmarks import common

ROOT = Path(__file__).resolve().parents[2]
CARTPOLE = ROOT / "configs" / "ppo_cartpole.yaml"


class LaunchProcess:
    """`lamarckian-hpc launch` in a subprocess, its output lines timestamped as they come."""

    def __init__(self, command: list[str], cwd: Path) -> None:
        self.process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: queue.Queue[tuple[float, str]] = queue.Queue()
        self.output: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.put((time.monotonic(), line))

    def wait_for(self, pattern: str, timeout_seconds: float) -> tuple[float, re.Match] | None:
        """(when, match) of the first line matching `pattern`; None at the deadline or the end."""
        deadline = time.monotonic() + timeout_seconds
        while time.monotonic() < deadline:
            try:
                at, line = self.lines.get(timeout=0.5)
            except queue.Empty:
                if self.process.poll() is not None and self.lines.empty():
                    return None
                continue
            self.output.append(line)
            if match := re.search(pattern, line):
                return at, match
        return None


def launch_cartpole(folder: Path, name: str, nodes: int, overrides: list[str], max_wall_seconds: float,
                    cpus_per_node: int = 2, time_minutes: int = 10) -> tuple[LaunchProcess, str, Path]:
    """Submit PPO on CartPole for `max_wall_seconds` of training over `nodes` nodes, checkpointing
    every 5 s and flushing metrics every second; (the launch, its job id, the run file)."""
    from lamarckian_hpc.cluster.scheduler import cluster_problem

    if (problem := cluster_problem(nodes)) is not None:
        raise SystemExit(f"{name} needs the Slurm test cluster with {nodes} nodes: {problem} "
                         f"(slurm/testcluster/start.sh {nodes} && source /var/tmp/lamarckian-testcluster/env)")
    run = folder / "runs" / f"{name}.h5"
    launch = LaunchProcess([sys.executable, "-m", "lamarckian_hpc", "launch", str(CARTPOLE), "stop.target_return=null",
                            "stop.total_env_steps=100000000", f"stop.max_wall_seconds={max_wall_seconds}",
                            "algorithm.batch_size=1024", "storage.checkpoint_interval_seconds=5",
                            "storage.metrics_interval_seconds=1", *overrides,
                            f"storage.directory={run.parent}", f"storage.run_name={run.stem}",
                            "--nodes", str(nodes), "--cpus-per-node", str(cpus_per_node), "--time", str(time_minutes),
                            "--object-store-mb", "100", "--folder", str(folder / "jobs"), "--poll", "0.5",
                            "--wait-timeout", str(time_minutes * 60 + 300)], folder)
    submitted = launch.wait_for(r"submitted job (\d+)", 60)
    if submitted is None:
        raise SystemExit("launch did not submit:\n" + "".join(launch.output))
    return launch, submitted[1].group(1), run


def wait_for_version(launch: LaunchProcess, run: Path, version: int, timeout_seconds: float = 240) -> None:
    """Until a checkpoint at `version` or later exists (the run is well under way)."""
    from lamarckian_hpc.runtime.learner.checkpoint import load_checkpoint

    deadline = time.monotonic() + timeout_seconds
    checkpoint = run.with_suffix(".ckpt")
    while not (checkpoint.is_file() and load_checkpoint(checkpoint).policy_version >= version):
        launch.wait_for(r"^$", 0.5)  # keep its output
        if time.monotonic() > deadline or launch.process.poll() is not None:
            raise SystemExit(f"no checkpoint at policy version {version} within {timeout_seconds:.0f} s:\n"
                             + "".join(launch.output))


def end_job(job_id: str, restore: str | None = None) -> None:
    """Cancel the job (a no-op once it ended), return node `restore` to service when one was lost,
    and remove what the job's processes left in the shared /tmp."""
    nodes = common.testcluster_nodes()

    subprocess.run(["scancel", job_id], timeout=30)
    if restore is not None:
        nodes.restore_node(restore)
    time.sleep(2)  # let the cancelled job's processes go
    nodes.remove_job_leftovers(job_id)
