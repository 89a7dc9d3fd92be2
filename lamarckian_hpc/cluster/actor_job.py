"""An actor job: CPU nodes that join a running run, from another partition, and leave it cleanly.

Every task of the job (one per node) runs `ActorJob`: it waits for the run's contact in the run's
join folder (`storage.join_folder`; the learner job may still be queued), starts a Ray node that
joins the run's cluster with the cluster's token, offering its CPUs and `JOINED_NODE_RESOURCE`,
and then waits. The learner places a relay and one actor per CPU there (`runtime.placement
.joined_nodes`). No MPI: the tasks of an actor job never need each other.

Leaving: Slurm warns a job before its time limit (`--signal=USR2@<delay>`), cancels it with
SIGTERM (scancel, preemption). On either, the task writes `leaving/<label>` and waits up to
`leave_seconds` for the learner's `left/<label>`: by then its actors have stopped, what they sent
has come up and their credits are back in the learner's pool. Then it stops its Ray node and
returns. A task killed outright (SIGKILL, a dead node) leaves as a lost node: the learner sees Ray
mark it dead and takes its credits back then.

The learner job's requeue: the head goes away with the learner job, so the task stops its Ray
node and waits (up to `reconnect_seconds`) for the resumed learner's new contact, then joins again:
actor jobs outlive a requeue of the learner and serve its next run. Once the run has finished (its
`finished` marker) or no learner came back in time, the task returns.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..storage.join_folder import JOINED_NODE_RESOURCE, JoinFolder, RunContact, join_folder_of
from .discovery import describe_this_node
from .ray_cluster import RAY_PORT_OPTIONS, HeadGone, ray_start_command
from .ray_node import RayClusterError, RayNodeJoin, RaySettings
from .slurm_env import SlurmJob

log = logging.getLogger(__name__)

CHECK_SECONDS = 0.5


@dataclass(frozen=True)
class ActorJobSpec:
    """What every task of an actor job needs, as plain data (submitit stores it in the job folder)."""

    join_folder: str
    log_dir: str
    ray_object_store_mb: int = 200
    #: How long to wait for the run's contact: at the start (the learner job may be queued behind
    #: this one) and after the head went away (a requeued learner job).
    reconnect_seconds: float = 600.0
    #: How long a leaving node waits for the learner to let it go before it stops anyway.
    leave_seconds: float = 10.0


def node_label(slurm: SlurmJob | None) -> str:
    """The joined node's name in the run: its Slurm node and job, unique across the run's life."""
    if slurm is None:
        return f"{socket.gethostname()}-pid{os.getpid()}"
    return f"{slurm.node_name}-job{slurm.job_id}"


class ActorJob:
    """Run by every task of an actor job; returns what it did (joins, how it left)."""

    def __call__(self, spec: ActorJobSpec) -> dict[str, Any]:
        os.environ.setdefault("PYTHONUNBUFFERED", "1")
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
        leave = threading.Event()

        def on_signal(number: int, _frame: Any) -> None:
            log.info("signal %s: leaving the run", signal.Signals(number).name)
            leave.set()

        for number in (signal.SIGTERM, signal.SIGUSR2, signal.SIGINT):
            signal.signal(number, on_signal)
        return join_run(spec, leave)


def _wait_for_contact(folder: JoinFolder, leave: threading.Event, seconds: float,
                      not_generation: str | None) -> RunContact | None:
    """The run's contact once there is one of another generation than `not_generation`; None when
    the run finished, this task is leaving, or none came within `seconds`."""
    deadline = time.monotonic() + seconds
    while not leave.is_set() and time.monotonic() < deadline:
        if folder.finished():
            return None
        contact = folder.contact()
        if contact is not None and contact.generation != not_generation:
            return contact
        leave.wait(CHECK_SECONDS * 4)
    return None


def join_run(spec: ActorJobSpec, leave: threading.Event) -> dict[str, Any]:
    """Join the run, serve it until `leave` is set or the run is over, rejoining after a requeue of
    the learner job."""
    folder = JoinFolder(spec.join_folder)
    slurm = SlurmJob.from_environ()
    spec = replace(spec, log_dir=spec.log_dir.replace("%j", slurm.job_id if slurm else "local"))
    label = node_label(slurm)
    settings = RaySettings(object_store_bytes=spec.ray_object_store_mb * 1024 * 1024)
    outcome: dict[str, Any] = {"node": label, "joins": 0, "ended": "no run"}
    generation: str | None = None
    while True:
        contact = _wait_for_contact(folder, leave, spec.reconnect_seconds, generation)
        if contact is None:
            outcome["ended"] = ("left" if leave.is_set() else "run finished" if folder.finished()
                                else f"no learner within {spec.reconnect_seconds:.0f} s")
            return outcome
        generation = contact.generation
        node = _start_node(contact, label, slurm, spec, settings, outcome["joins"])
        outcome["joins"] += 1
        print(f"{label}: joined the run {contact.run_path} (head {contact.head_address}, learner job "
              f"{contact.learner_job_id})", flush=True)
        head_gone = HeadGone(contact.head_host, contact.head_port, node)
        while not leave.is_set() and not head_gone():
            leave.wait(CHECK_SECONDS)
        if leave.is_set():
            let_go = _announce_leaving(folder, label, spec.leave_seconds, head_gone)
            node.stop(settings.stop_timeout_seconds)
            outcome["ended"] = "left" if let_go else f"left without the learner's answer within {spec.leave_seconds:g} s"
            print(f"{label}: {outcome['ended']}", flush=True)
            return outcome
        print(f"{label}: the run's head is gone; waiting for the learner to come back", flush=True)
        node.stop(settings.stop_timeout_seconds)


def _start_node(contact: RunContact, label: str, slurm: SlurmJob | None, spec: ActorJobSpec,
                settings: RaySettings, attempt: int) -> RayNodeJoin:
    with ExitStack() as stack:  # the free ports are released just before Ray takes them
        me = describe_this_node(0, stack, len(RAY_PORT_OPTIONS))
    # Named as a job's Ray temp dirs are, per job and node (short: Ray's socket paths live below it).
    temp_dir = os.path.join(tempfile.gettempdir(), f"lhr-{slurm.job_id if slurm else 'local'}-"
                                                   f"{slurm.node_name if slurm else os.getpid()}-{attempt}")
    log_path = os.path.join(spec.log_dir, f"ray-{label}.log")
    Path(spec.log_dir).mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": contact.ray_token,
           "RAY_USAGE_STATS_ENABLED": "0", "RAY_enable_metrics_collection": "0"}
    command = ray_start_command(me, label, contact.head_address, temp_dir, settings, {JOINED_NODE_RESOURCE: 1})
    node = RayNodeJoin(command, temp_dir, env, log_path, settings, 0)
    try:
        node.wait_until_up(settings.start_timeout_seconds)
    except RayClusterError:
        node.stop(settings.stop_timeout_seconds)
        raise
    return node


def _announce_leaving(folder: JoinFolder, label: str, seconds: float, head_gone: HeadGone) -> bool:
    """Say this node leaves and wait for the learner to let it go; whether it did in time."""
    folder.announce_leaving(label)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if folder.was_let_go(label):
            return True
        if head_gone():
            return False
        time.sleep(0.1)
    return False


def main(argv: list[str] | None = None) -> int:
    """One task of a plain `sbatch` actor job (slurm/actors.sbatch): join the run of the given run
    file, leave on the job's end."""
    import argparse

    parser = argparse.ArgumentParser(description="One node of an actor job joining a running run.")
    parser.add_argument("run_file", help="the run's file; its join folder (RUN.join) is beside it")
    parser.add_argument("--log-dir", default=".", help="where the Ray node's log goes")
    parser.add_argument("--reconnect-seconds", type=float, default=600.0,
                        help="how long to wait for the run's learner (queued or requeued)")
    args = parser.parse_args(argv)
    spec = ActorJobSpec(join_folder=str(join_folder_of(Path(args.run_file).resolve())),
                        log_dir=str(Path(args.log_dir).resolve()), reconnect_seconds=args.reconnect_seconds)
    outcome = ActorJob()(spec)
    print(f"{outcome['node']}: {outcome['joins']} joins, {outcome['ended']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

