"""Chaos on the Slurm test cluster: PPO on CartPole launched over separate hosts, one fault per run.

    slurm/testcluster/start.sh 8 && source /var/tmp/lamarckian-testcluster/env   # (with per-node quotas)
    python benchmarks/reliability/chaos.py                          # every fault, 8 hosts (a few minutes each)
    python benchmarks/reliability/chaos.py --only relay_kill link_cut --hosts 4

Each fault is injected for real into a running `lamarckian-hpc launch` (slurm/testcluster: every
node its own network namespace, its actors in their own CPU quota):

- learner_stop: the learner's process (the job's bootstrap task on the first node, which drives
  the run) SIGSTOPped for 150 s, then SIGCONTinued;
- relay_kill: SIGKILL of the relay (`ray::RelayProcess`) of the second node; Ray restarts it;
- actor_kill_sync: SIGKILL of two actors (`ray::ActorProcess`) on two other nodes, with
  `runtime.sampling=sync`;
- link_cut: the third node's link (eth0 in its namespace) down for 20 s, then up, with
  `runtime.on_node_loss=continue` (Ray marks a node dead after `runtime.node_loss_seconds` of
  unanswered health checks; with `fail`, the default, the run stops there with a checkpoint, exit 1);
- bad_messages: a process holding the job's actor keys (the key folder beside the run file) sends
  10,000 messages that decode but are wrong inside (meta of the wrong types, NaN and inf, arrays
  whose lengths do not match, 0-d arrays) to the learner's experience address (the run file's
  /meta `learner_experience_address`);
- requeue: `scontrol requeue` of the job (Slurm's requeue hold lifted at once); the job resumes
  from its checkpoint;
- all_faults: one long run with every fault but the synchronous one, in turn, 20 s apart: a relay
  killed, the learner stopped, two actors killed, a link cut, the bad messages, then the requeue.

For each: the time from the end of the fault to the first update after it and to `staleness_mean`
back under 2, the most credits in flight after recovery against the credit budget, the mean
staleness after recovery, what the run counted (lost messages, credits written off, late and
reclaimed, malformed messages, incomplete batches: their increase from before the fault to the
end), whether the launch exited 0 with the run file closed cleanly, and how many of the reads of
the run file made every second while it ran failed. Prints one table and writes
benchmarks/results/chaos.json (a partial run replaces only its own rows).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import common
from benchmarks.reliability.cluster_launch import CARTPOLE, end_job, launch_cartpole, wait_for_version

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "chaos.json"
COUNTED = ("lost_messages", "credits_written_off", "credits_late", "credits_reclaimed", "malformed_messages",
           "incomplete_batches", "dropped_stale_steps", "actor_restarts")
STALENESS_RECOVERED = 2.0
AFTER_SECONDS = 75.0  # training after the fault
WARM_VERSION = 10  # the fault comes once a checkpoint at this policy version exists


class RunFileWatch:
    """Reads the run file every `interval` seconds while the job runs, as a user following it
    would: how many reads failed, and (time, newest row's wall time) of every read, to place the
    file's rows on this process's clock."""

    def __init__(self, path: Path, interval: float = 1.0) -> None:
        self.path, self.interval = path, interval
        self.reads = self.failures = 0
        self.errors: list[str] = []
        self.newest: list[tuple[float, float]] = []  # (time.monotonic() of the read, newest row's wall_time)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        from lamarckian_hpc.storage import open_run

        while not self._stop.wait(self.interval):
            if not self.path.exists():
                continue  # not created yet
            self.reads += 1
            try:
                with open_run(self.path) as reader:
                    wall = reader.metric("learning_rate").wall_time
                    reader.metric("credits_in_flight")
                    reader.closed_cleanly  # noqa: B018 (read as a reader of a live file reads it)
                if len(wall):
                    self.newest.append((time.monotonic(), float(wall[-1])))
            except Exception as error:  # noqa: BLE001 - counted: the point is whether reads fail
                self.failures += 1
                if len(self.errors) < 3:
                    self.errors.append(f"{type(error).__name__}: {error}"[:300])

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


@dataclass
class Fault:
    """What an injection did: when it started and ended (time.monotonic()), how many faults it
    made, and anything it observed."""

    start: float
    end: float
    injected: int
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Case:
    description: str
    overrides: tuple[str, ...]
    fault_seconds: float  # how long the fault lasts, for the run's wall-time limit
    inject: Callable[[str, Path, int], Fault]  # (job id, run file, hosts)


def learner_stop(job_id: str, run: Path, hosts: int, seconds: float = 150.0) -> Fault:
    nodes = common.testcluster_nodes()

    pid = nodes.bootstrap_task("node1", job_id)
    start = time.monotonic()
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.kill(pid, signal.SIGCONT)
    return Fault(start, time.monotonic(), 1, {"learner_pid": pid, "stopped_seconds": seconds})


def _kill_titled(job_id: str, nodes: list[str], title: str) -> Fault:
    cluster = common.testcluster_nodes()

    victims = {}
    for node in nodes:
        found = cluster.job_processes_titled(node, job_id, title)
        if not found:
            raise RuntimeError(f"no {title} of job {job_id} on {node}")
        victims[node] = found[0]
    start = time.monotonic()
    for pid in victims.values():
        os.kill(pid, signal.SIGKILL)
    return Fault(start, time.monotonic(), len(victims), {"killed": victims})


def relay_kill(job_id: str, run: Path, hosts: int) -> Fault:
    return _kill_titled(job_id, ["node2"], "ray::RelayProcess")


def actor_kill_sync(job_id: str, run: Path, hosts: int) -> Fault:
    return _kill_titled(job_id, ["node2", f"node{hosts}"], "ray::ActorProcess")


def link_cut(job_id: str, run: Path, hosts: int, seconds: float = 20.0) -> Fault:
    node = "node3"

    def link(state: str) -> None:
        subprocess.run(["ip", "netns", "exec", node, "ip", "link", "set", "eth0", state], check=True, timeout=30)

    start = time.monotonic()
    link("down")
    try:
        time.sleep(seconds)
    finally:
        link("up")
    return Fault(start, time.monotonic(), 1, {"node": node, "device": "eth0", "down_seconds": seconds})


def bad_experience(index: int, version: int) -> Any:
    """The `index`-th of the bad messages: well-formed on the wire, wrong inside, cycling through
    wrong meta types, NaN and inf, arrays whose lengths do not match and 0-d arrays. Each claims
    the current policy version, so that none is merely dropped as stale."""
    from lamarckian_hpc.comm import Message
    from lamarckian_hpc.runtime.messages import EXPERIENCE

    steps = 32
    arrays: dict[str, np.ndarray] = {
        "observations": np.zeros((steps, 4), np.float32), "actions": np.zeros(steps, np.int64),
        "log_probs": np.full(steps, -0.69, np.float32), "rewards": np.ones(steps, np.float32),
        "policy_versions": np.full(steps, version, np.int64), "lengths": np.array([steps], np.int64),
        "terminated": np.array([False]), "bootstrap_observations": np.zeros((1, 4), np.float32),
        "episode_returns": np.zeros(0, np.float64), "episode_lengths": np.zeros(0, np.int64)}
    meta: dict[str, Any] = {"actor_index": 0, "env_frames": steps, "env_errors": 0, "sequence": -1,
                            "policy_id": "main"}
    kind = index % 16
    if kind == 0:
        meta["actor_index"] = "zero"
    elif kind == 1:
        meta["env_frames"] = [steps]
    elif kind == 2:
        meta["policy_id"] = 7
    elif kind == 3:
        meta["sequence"] = {"n": 1}
    elif kind == 4:
        arrays["rewards"] = np.full(steps, np.nan, np.float32)
    elif kind == 5:
        arrays["observations"] = np.full((steps, 4), np.inf, np.float32)
    elif kind == 6:
        arrays["log_probs"] = np.full(steps, -np.inf, np.float32)
    elif kind == 7:
        arrays["observations"] = np.zeros((steps - 5, 4), np.float32)
    elif kind == 8:
        arrays["actions"] = np.zeros(steps + 3, np.int64)
    elif kind == 9:
        arrays["lengths"] = np.array([steps + 8, -8], np.int64)
        arrays["terminated"] = np.array([False, False])
        arrays["bootstrap_observations"] = np.zeros((2, 4), np.float32)
    elif kind == 10:
        arrays["rewards"] = np.array(1.0, np.float32)
    elif kind == 11:
        arrays["lengths"] = np.array(steps, np.int64)
    elif kind == 12:
        arrays["observations"] = np.zeros((steps, 7), np.float32)
    elif kind == 13:
        arrays["actions"] = np.full(steps, 9, np.int64)  # CartPole has actions 0 and 1
    elif kind == 14:
        meta["actor_index"] = 1 << 40
    else:
        arrays["policy_versions"] = np.full(steps, version + 1_000_000, np.int64)
    return Message(EXPERIENCE, "actor-0", int(arrays["policy_versions"].max()) if arrays["policy_versions"].ndim else 0,
                   arrays, meta)


def bad_messages(job_id: str, run: Path, hosts: int, count: int = 10_000) -> Fault:
    import zmq

    from lamarckian_hpc.comm import JobKeys
    from lamarckian_hpc.comm.channels import ExperienceSender
    from lamarckian_hpc.storage import open_run

    with open_run(run) as reader:
        address = str(reader.meta["learner_experience_address"])
        version = int(reader.metric("learning_rate").policy_version[-1])
    keys = JobKeys.load(run.with_suffix(".keys") / "actor")  # what every actor of the job is given
    context = zmq.Context()
    sender = ExperienceSender(context, address, keys=keys, high_water_mark=1000)
    sent = 0
    start = time.monotonic()
    try:
        for index in range(count):
            sent += sender.send(bad_experience(index, version), timeout_ms=10_000)
    finally:
        sender.socket.setsockopt(zmq.LINGER, 60_000)  # the queued ones leave before the socket closes
        sender.close()
        context.term()
    return Fault(start, time.monotonic(), sent, {"address": address, "claimed_version": version,
                                                 "kinds_of_bad_message": 16})


def all_faults(job_id: str, run: Path, hosts: int, gap_seconds: float = 20.0) -> Fault:
    """Every fault in turn, in one run (asynchronous sampling); each fault's own counts in detail."""
    steps = [("relay_kill", relay_kill), ("learner_stop", learner_stop),
             ("actor_kill", lambda *a: _kill_titled(job_id, ["node2", f"node{hosts}"], "ray::ActorProcess")),
             ("link_cut", link_cut), ("bad_messages", bad_messages), ("requeue", requeue)]
    start, injected, detail = time.monotonic(), 0, {}
    for index, (name, inject) in enumerate(steps):
        if index:
            time.sleep(gap_seconds)
        print(f"    all_faults: {name}", flush=True)
        fault = inject(job_id, run, hosts)
        injected += fault.injected
        detail[name] = {"at_s": round(fault.start - start, 1), "seconds": round(fault.end - fault.start, 1),
                        "injected": fault.injected}
    return Fault(start, time.monotonic(), injected, detail)


def requeue(job_id: str, run: Path, hosts: int) -> Fault:
    start = time.monotonic()
    subprocess.run(["scontrol", "requeue", job_id], check=True, timeout=30)
    end = time.monotonic()
    # Slurm holds a requeued job (about two minutes) once it is PENDING again; lift the hold then.
    # An update made while the job is still completing does not last.
    released = False
    for _ in range(120):
        shown = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, timeout=30).stdout
        if "JobState=PENDING" in shown:
            released = subprocess.run(["scontrol", "update", f"jobid={job_id}", "StartTime=now"],
                                      capture_output=True, timeout=30).returncode == 0
            break
        time.sleep(1)
    return Fault(start, end, 1, {"hold_lifted": released})


CASES: dict[str, Case] = {
    "learner_stop": Case("learner SIGSTOPped for 150 s, then SIGCONT", (), 150.0, learner_stop),
    "relay_kill": Case("SIGKILL of node2's relay (Ray restarts it)", (), 0.0, relay_kill),
    "actor_kill_sync": Case("SIGKILL of two actors, synchronous sampling", ("runtime.sampling=sync",), 0.0,
                            actor_kill_sync),
    "link_cut": Case("node3's link down for 20 s, then up", ("runtime.on_node_loss=continue",), 20.0, link_cut),
    "bad_messages": Case("10,000 bad messages from a holder of the job's keys", (), 20.0, bad_messages),
    "requeue": Case("scontrol requeue of the job (resumes from its checkpoint)", (), 0.0, requeue),
    "all_faults": Case("every fault in turn, 20 s apart, ending with a requeue", ("runtime.on_node_loss=continue",),
                       150.0 + 20.0 + 60.0 + 5 * 20.0, all_faults),
}


def _rows(run: Path) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, dict[str, Any], bool]:
    """Every metric's values, the rows' wall times and versions, /meta, and whether it closed cleanly."""
    from lamarckian_hpc.storage import open_run

    with open_run(run) as reader:
        base = reader.metric("learning_rate")
        values = {name: np.asarray(reader.metric(name).value) for name in
                  ("staleness_mean", "credits_in_flight", *COUNTED)}
        return values, np.asarray(base.wall_time), np.asarray(base.policy_version), dict(reader.meta), \
            reader.closed_cleanly


def _resumed_at(versions: np.ndarray, meta: dict[str, Any]) -> int:
    """The index of a resumed run's first row of its new process (the rows' count when not resumed)."""
    resumed = meta.get("resumed_through_version")
    return int(np.searchsorted(versions, resumed, side="right")) if resumed is not None else len(versions)


def _clock(wall: np.ndarray, versions: np.ndarray, meta: dict[str, Any],
           reads: list[tuple[float, float]]) -> np.ndarray:
    """Each row's time on this process's clock. A row's wall time counts from its process's start
    (a resumed run continues the checkpoint's): per process, the offset is the smallest gap between
    a read and the newest row it saw, which a read right after a flush makes tight."""
    clock = np.full(wall.shape, np.nan)
    split = _resumed_at(versions, meta)
    for segment in (slice(0, split), slice(split, len(wall))):
        walls = set(wall[segment].tolist())
        gaps = [read - newest for read, newest in reads if newest in walls]
        if gaps:
            clock[segment] = wall[segment] + min(gaps)
    return clock


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None or not np.isfinite(value) else round(float(value), digits)


def measure(name: str, case: Case, fault: Fault, run: Path, reads: RunFileWatch, returncode: int | None,
            budget: int) -> dict[str, Any]:
    values, wall, versions, meta, closed = _rows(run)
    clock = _clock(wall, versions, meta, reads.newest)
    after = np.nonzero(clock > fault.end)[0]
    before = np.nonzero(clock < fault.start)[0]
    first = int(after[0]) if after.size else None
    settled = next((int(i) for i in after if values["staleness_mean"][i] < STALENESS_RECOVERED), None)
    recovered = slice(first, None) if first is not None else slice(0, 0)
    # A resumed job's counters start again from nothing in its new process: each process's increase
    # from the last row before the fault (or from nothing) to its own last row kept, summed.
    split = _resumed_at(versions, meta)
    last_before = int(before[-1]) if before.size else -1
    counted = {}
    for key in COUNTED:
        series = values[key]
        increases = [float(series[hi - 1]) - (float(series[last_before]) if lo <= last_before else 0.0)
                     for lo, hi in ((0, split), (split, len(series))) if hi > lo and last_before < hi]
        counted[key] = int(sum(increases)) if len(series) else None
    in_flight = values["credits_in_flight"][recovered]
    staleness = values["staleness_mean"]
    # How staleness went after the fault: the mean of each 10 s after its end, and before it.
    windows = [staleness[(clock > fault.end + start) & (clock <= fault.end + start + 10)]
               for start in range(0, int(np.nanmax(clock) - fault.end) + 1, 10)] if after.size else []
    return {
        "name": name, "fault": case.description, "injected": fault.injected,
        "first_update_after_s": _round(clock[first] - fault.end) if first is not None else None,
        # A share that never comes shows here, not in the first update (a batch may be full already).
        "longest_update_gap_after_s": _round(float(np.diff(np.concatenate([[fault.end], clock[after]])).max()))
        if after.size else None,
        "staleness_under_2_after_s": _round(clock[settled] - fault.end) if settled is not None else None,
        "credits_in_flight_max_after": int(in_flight.max()) if in_flight.size else None, "credit_budget": budget,
        "staleness_mean_after": _round(float(values["staleness_mean"][recovered].mean()), 2)
        if values["staleness_mean"][recovered].size else None,
        **counted,
        "launch_exit": returncode, "closed_cleanly": bool(closed),
        "finished": returncode == 0 and bool(closed),
        "file_reads": reads.reads, "file_read_failures": reads.failures,
        "detail": {**fault.detail, "fault_seconds": round(fault.end - fault.start, 1),
                   "updates_before_fault": int(before.size), "updates_after_fault": int(after.size),
                   "staleness_mean_before": _round(float(staleness[before[-10:]].mean()), 2) if before.size else None,
                   "staleness_mean_per_10s_after": [_round(float(w.mean()), 2) if w.size else None for w in windows],
                   "policy_version_end": int(versions.max()) if versions.size else 0,
                   **({"resumed_through_version": int(meta["resumed_through_version"])}
                      if "resumed_through_version" in meta else {}),
                   **({"read_errors": reads.errors} if reads.errors else {})},
    }


def case_sampling(name: str, sampling: str = "async") -> str:
    """The sampling a case runs with: its own when it sets one (actor_kill_sync), else `sampling`."""
    own = [item.split("=", 1)[1] for item in CASES[name].overrides if item.startswith("runtime.sampling=")]
    return own[0] if own else sampling


def chaos_run(folder: Path, name: str, hosts: int, sampling: str = "async", case: Case | None = None,
              after_seconds: float = AFTER_SECONDS, warm_version: int = WARM_VERSION) -> dict[str, Any]:
    """One job with one fault (`CASES[name]`, or `case`), measured (`measure`): its row."""
    from lamarckian_hpc.config import load_config
    from lamarckian_hpc.runtime.run_shape import credit_budget

    case = case or CASES[name]
    sampling = case_sampling(name, sampling) if name in CASES else sampling
    overrides = [f"runtime.num_actors={hosts}", f"runtime.sampling={sampling}", *case.overrides]
    if sampling == "sync" and "runtime.on_node_loss=continue" in overrides:
        # Refused with synchronous sampling (`config.train`): such a run stops at a node's loss,
        # with its checkpoint, as `fail` says.
        overrides.remove("runtime.on_node_loss=continue")
    budget = credit_budget(load_config(CARTPOLE, overrides), hosts)
    # Training time: the warm-up, the fault (a stopped learner's time counts too), then after_seconds;
    # a requeued job resumes at its checkpoint's training time.
    max_wall = 45.0 + case.fault_seconds + after_seconds
    launch, job_id, run = launch_cartpole(folder, f"chaos_{name}_{sampling}", hosts, overrides, max_wall,
                                         time_minutes=20 if name == "all_faults" else 12)
    reads = RunFileWatch(run)
    returncode = None
    try:
        wait_for_version(launch, run, warm_version, timeout_seconds=300)
        print(f"  {name} ({sampling}): injecting into job {job_id}", flush=True)
        fault = case.inject(job_id, run, hosts)
        print(f"  {name} ({sampling}): fault over after {fault.end - fault.start:.1f} s ({fault.injected} injected)",
              flush=True)
        launch.wait_for(r"completed: |^error: ", max_wall + 600)
        returncode = launch.process.wait(120)
    finally:
        if launch.process.poll() is None:
            launch.process.kill()
        end_job(job_id)
        reads.stop()
    # The reads' times beside the run file, so that the measure can be checked afterwards.
    run.with_suffix(".reads.json").write_text(json.dumps({"fault": [fault.start, fault.end], "reads": reads.newest}))
    row = measure(name, case, fault, run, reads, returncode, budget)
    row["sampling"] = sampling
    row["detail"]["measured"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    row["detail"]["launch_tail"] = [line.strip() for line in launch.output[-3:]]
    return row


COLUMNS = ("name", "sampling", "injected", "first_update_after_s", "longest_update_gap_after_s",
           "staleness_under_2_after_s", "credits_in_flight_max_after", "credit_budget", "staleness_mean_after",
           *COUNTED[:6], "finished", "file_read_failures")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=list(CASES), default=None, help="faults to inject (default all)")
    parser.add_argument("--hosts", type=int, default=8, help="test-cluster nodes of each job (default 8)")
    parser.add_argument("--sampling", choices=["async", "sync"], default="async",
                        help="runtime.sampling of every case that does not set its own (default async); "
                             "a row is kept per case and sampling")
    common.add_common_args(parser)
    args = parser.parse_args()
    names = args.only or list(CASES)
    rows = []
    folder = Path(tempfile.mkdtemp(prefix="chaos-"))  # kept: the run files and job logs, to look into
    print(f"chaos: runs and logs in {folder}", flush=True)
    for name in names:
        sampling = case_sampling(name, args.sampling)
        print(f"chaos: {name} ({sampling} sampling) on {args.hosts} hosts ...", flush=True)
        started = time.monotonic()
        try:
            row = chaos_run(folder, name, args.hosts, sampling)
        except (Exception, SystemExit) as error:  # noqa: BLE001 - a fault that broke the benchmark is a row too
            row = {"name": name, "sampling": sampling, "fault": CASES[name].description, "finished": False,
                   "detail": {"error": f"{type(error).__name__}: {error}"[-2000:]}}
        row["hosts"] = args.hosts
        row["detail"]["benchmark_seconds"] = round(time.monotonic() - started)
        rows.append(row)
        print(json.dumps(row, default=str), flush=True)
    print("\n" + " | ".join(COLUMNS))
    for row in rows:
        print(" | ".join(str(row.get(column, "")) for column in COLUMNS))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    earlier = (common.read_results(RESULTS, args.label) or {}).get("rows", [])
    # A partial run replaces only its own rows (a case with one sampling).
    merged = {(row["name"], row.get("sampling") or case_sampling(row["name"])): row for row in [*earlier, *rows]}
    order = list(CASES)
    common.write_results(RESULTS, {
        "time": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "hosts": args.hosts,
        "node_cpus": os.environ.get("TESTCLUSTER_NODE_CPUS") or None,
        # Each case with its own sampling first, in the cases' order, then the runs with the other.
        "rows": [merged[key] for key in sorted(merged, key=lambda key: (key[1] != case_sampling(key[0]),
                                                                         order.index(key[0])))]}, args.label)
    print(f"\nwrote {RESULTS}")


if __name__ == "__main__":
    main()
