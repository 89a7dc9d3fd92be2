"""The node-loss rows of benchmarks/reliability/faults.py: a 4-node `lamarckian-hpc launch` on the Slurm test
cluster (slurm/testcluster), one node lost mid-run, once per `runtime.on_node_loss` policy.

The node is lost the way `kill_node` of slurm/testcluster/testcluster_nodes.py loses it: its slurmd, its
step daemon, the bootstrap task, its Ray node and its actor are SIGKILLed at once. The node is
restored afterwards (slurmd restarted, resumed), whatever happened. Run through faults.py:

    python benchmarks/reliability/faults.py --only node_loss node_loss_continue
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks import common
from benchmarks.reliability.cluster_launch import LaunchProcess, end_job, launch_cartpole, wait_for_version
from lamarckian_hpc.storage import open_run

LOST = "node3"


def _launch(folder: Path, policy: str, max_wall_seconds: float) -> tuple[LaunchProcess, str, Path]:
    return launch_cartpole(folder, f"node_loss_{policy}", 4, ["runtime.num_actors=4", f"runtime.on_node_loss={policy}"],
                           max_wall_seconds)


def _rows(run: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """policy version, env frames and wall time of every update the run file holds now."""
    with open_run(run) as reader:
        series = reader.metric("learning_rate")
        return np.asarray(series.policy_version), np.asarray(series.env_frames), np.asarray(series.wall_time)


def _gaps(versions: np.ndarray) -> tuple[int, int]:
    duplicated = int(versions.size - np.unique(versions).size)
    missing = int(np.setdiff1d(np.arange(1, versions.max() + 1), versions).size)
    return duplicated, missing


def _end(job_id: str) -> None:
    end_job(job_id, restore=LOST)


def node_loss_fail(folder: Path) -> dict:
    """`runtime.on_node_loss=fail`: how long until `launch` ends with its one-line error, how many
    updates the checkpoint lacks, and whether `train --resume` continues the file without gaps."""
    nodes = common.testcluster_nodes()
    from lamarckian_hpc.runtime.learner.checkpoint import load_checkpoint

    launch, job_id, run = _launch(folder, "fail", 300)
    try:
        wait_for_version(launch, run, 10)
        killed = nodes.kill_node(LOST, job_id)
        error = launch.wait_for(r"^error: ", 180)
        launch.process.wait(60)
    finally:
        _end(job_id)
    before, _, _ = _rows(run)
    saved = load_checkpoint(run.with_suffix(".ckpt"))
    resumed = subprocess.run([sys.executable, "-m", "lamarckian_hpc", "train", "--resume", str(run),
                              "runtime.ray_address=null", "runtime.num_actors=1",
                              f"stop.total_env_steps={saved.env_frames + 8192}", "stop.max_wall_seconds=null"],
                             cwd=folder, capture_output=True, text=True)
    after, _, _ = _rows(run)
    duplicated, missing = _gaps(after)
    error_line = "" if error is None else error[1].string.strip()
    return {"fault": f"killed slurmd of one simulated node ({LOST}) in a 4-node job, with its step daemon, task, "
                     "Ray node and actor (runtime.on_node_loss=fail)",
            "injected": 1,
            "survived": f"node {LOST} was lost" in error_line and resumed.returncode == 0 and not duplicated and not missing,
            "data_lost": f"{int(before.max()) - saved.policy_version} updates (checkpoint saved at the loss); "
                         "the lost node's unsent rollouts",
            "detail": {"launch_error_after_seconds": None if error is None else round(error[0] - killed.killed_at, 1),
                       "error_line": error_line, "killed_processes": 1 + len(killed.step_daemon_pids) + len(killed.job_pids),
                       "rows_before_loss": int(before.size), "checkpoint_version": saved.policy_version,
                       "resume_returncode": resumed.returncode, "rows_after_resume": int(after.size),
                       "duplicated_rows": duplicated, "missing_versions": missing}}


def node_loss_continue(folder: Path, max_wall_seconds: float = 150) -> dict:
    """`runtime.on_node_loss=continue` (job submitted with --no-kill): does training outlive Slurm
    marking the node DOWN, and how fast does it sample before the loss and after it?"""
    nodes = common.testcluster_nodes()

    launch, job_id, run = _launch(folder, "continue", max_wall_seconds)
    down_after = None
    try:
        wait_for_version(launch, run, 10)
        at_kill = _rows(run)
        killed = nodes.kill_node(LOST, job_id)
        while "DOWN" not in nodes.node_state(LOST) and time.monotonic() - killed.killed_at < 150:
            launch.wait_for(r"^$", 0.5)
        down_after = time.monotonic() - killed.killed_at
        at_down = _rows(run)
        ended = launch.wait_for(r"completed: .*", max_wall_seconds + 120)
        launch.process.wait(60)
    finally:
        _end(job_id)
    versions, frames, wall = _rows(run)
    duplicated, missing = _gaps(versions)
    kill_wall, down_wall = float(at_kill[2][-1]), float(at_down[2][-1])

    def rate(start: float, end: float) -> float:
        inside = (wall >= start) & (wall <= end)
        return float(np.ptp(frames[inside]) / max(np.ptp(wall[inside]), 1e-9)) if inside.sum() > 1 else float("nan")

    completed = "" if ended is None else ended[1].string.strip()
    after_down = int(versions.max() - at_down[0].max())
    return {"fault": f"killed slurmd of one simulated node ({LOST}) in a 4-node job, with its step daemon, task, "
                     "Ray node and actor (runtime.on_node_loss=continue, --no-kill)",
            "injected": 1,
            "survived": f"lost {LOST}" in completed and after_down > 0 and not duplicated and not missing,
            "data_lost": "the lost node's unsent rollouts; its actor (1 of 4) for the rest of the run",
            "detail": {"marked_down_after_seconds": None if down_after is None else round(down_after, 1),
                       "completed_line": completed, "version_at_kill": int(at_kill[0].max()),
                       "version_at_down": int(at_down[0].max()), "updates_after_down": after_down,
                       "frames_per_second_before_loss": round(rate(kill_wall - 20, kill_wall)),
                       "frames_per_second_after_down": round(rate(down_wall, float(wall.max()))),
                       "duplicated_rows": duplicated, "missing_versions": missing}}
