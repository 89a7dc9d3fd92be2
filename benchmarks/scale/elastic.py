"""Elastic actors: a running run that actor jobs join and leave, on the Slurm test cluster.

One `lamarckian-hpc launch` of `configs/ppo_cartpole.yaml` (asynchronous PPO, no target return)
as a learner job in the `learner` partition (node1, with one actor of its own), and actor jobs
in the `cpu` partition submitted with `lamarckian-hpc join` while it trains, `--nodes-per-job`
nodes each, one actor per CPU. On the schedule given (seconds since the run's start, /meta's
`start_time`): one actor job joins at each `--join-at`; at each `--leave-at` the oldest job still
in the run is cancelled (`scancel`: its nodes leave cleanly), and at each `--kill-at` the next
one's nodes are killed (`testcluster_nodes.kill_node`: as a crashed host, noticed when Ray marks
the node dead; the nodes are restored after the run). Then a static run for comparison: a
`launch --actor-jobs K` with the same nodes from the start, for each K of `--static-jobs`.

It reports, from the run file (`hosts_connected`, `env_frames`, `staleness_mean`,
`credits_in_flight` of every update), the join folder's `leaving/` and `left/` markers (their
mtimes) and Slurm (`squeue -o %T`, polled):

- env steps/s in every `--window` seconds, with the hosts in the run, and a figure of both
  (docs/benchmarks/figures/elastic.png);
- join: from the actor job's RUNNING state to the first update that counts one of its nodes
  (`hosts_connected` up), and all of them (goal 30 s or less);
- clean leave: from `scancel` to the learner's `left/<label>` marker (its actors stopped, their
  credit accounts closed: the credits whole again), and to the first update with the nodes gone
  (goal 5 s or less); killed nodes: from the kill to the first update without them;
- env steps/s per node after each join against the static run on the same nodes (goal 90%);
- staleness: the mean of the per-update `staleness_mean` in each window (goal 2 or less);
- learner restarts: the learner job's Slurm restarts, the run's `resumes` and the `starting`
  lines of the driver's log (goal: 0, 0 and 1).

Needs a running test cluster with one CPU quota per node, e.g.:

    flock -o /tmp/testcluster.lock -c 'TESTCLUSTER_NODE_CPUS=0.15 TESTCLUSTER_CPU_QUOTA_SCOPE=actors \\
        TESTCLUSTER_LEARNER_CPUS=0.3 TESTCLUSTER_CPU_PERIOD_US=10000 TESTCLUSTER_CPU_SHARES=8192 \\
        slurm/testcluster/start.sh 8 && . /var/tmp/lamarckian-testcluster/env && \\
        python benchmarks/scale/elastic.py --join-at 60 120 --leave-at 180 --kill-at 240 --nodes-per-job 2 \\
            --duration 300 --static-seconds 100'

`--analyse FOLDER` reads a finished run's folder (the script prints it) again without running.
Prints a Markdown table and writes benchmarks/results/elastic.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import common

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

RESULTS = common.results_path("elastic")
DOCS_FIGURE = common.FIGURES / "elastic.png"
CONFIG = ROOT / "configs" / "ppo_cartpole.yaml"
#: The run's settings beside the config's. One epoch on batches of 2048 keeps the learner (0.3 cores
#: on the test cluster) off the ceiling, so that env steps/s follow the nodes: with the config's 10
#: epochs on 512 the learner alone caps the run at about one node's sampling. `--overrides` adds more.
SETTINGS = ["runtime.num_actors=1", "runtime.sampling=async", "storage.metrics_interval_seconds=1",
            "stop.target_return=null", "stop.total_env_steps=1000000000", "storage.checkpoint_interval_seconds=60",
            "algorithm.num_epochs=1", "algorithm.batch_size=2048", "algorithm.num_minibatches=4"]
METRICS = ["hosts_connected", "actors_connected", "joined_nodes", "joined_actors", "staleness_mean", "staleness_max",
           "env_frames_per_second", "trained_frames_per_second", "credits_in_flight", "credits_written_off",
           "lost_messages", "actor_restarts"]
ACTORS_PER_NODE = 2  # --cpus-per-node 2 of every actor job: one actor per CPU
GOALS = {"join": 30.0, "leave": 5.0, "per_node_ratio": 0.9, "staleness": 2.0}


# ---------------------------------------------------------------- running
class Launch:
    """`lamarckian-hpc launch` in a child, its output kept and read line by line."""

    def __init__(self, folder: Path, name: str, seconds: float, flags: list[str], extra: list[str]) -> None:
        minutes = math.ceil((seconds + 300) / 60)
        command = [sys.executable, "-m", "lamarckian_hpc", "launch", str(CONFIG), *SETTINGS, *extra,
                   f"stop.max_wall_seconds={seconds}", f"storage.directory={folder / 'runs'}",
                   f"storage.run_name={name}", "--folder", str(folder / "jobs"), "--poll", "0.5",
                   "--wait-timeout", str(seconds + 900), "--partition", partition("LEARNER", "learner"),
                   "--nodes", "1", "--cpus-per-node", "2", "--gpus-per-node", "1", "--time", str(minutes),
                   "--object-store-mb", "100", *flags]
        self.log = (folder / f"{name}.launch.log").open("w")
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                        cwd=folder)
        self.lines: queue.Queue[str] = queue.Queue()
        self.output: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        self.run_path = folder / "runs" / f"{name}.h5"
        self.job_id = self.wait_for(r"submitted job (\d+)", 120).group(1)

    def _read(self) -> None:
        for line in self.process.stdout:
            self.log.write(line)
            self.log.flush()
            self.lines.put(line)

    def wait_for(self, pattern: str, seconds: float) -> re.Match:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.5)
            except queue.Empty:
                if self.process.poll() is not None and self.lines.empty():
                    break
                continue
            self.output.append(line)
            if match := re.search(pattern, line):
                return match
        raise RuntimeError(f"no line matching {pattern!r} within {seconds} s:\n{''.join(self.output[-40:])}")

    def finish(self, seconds: float) -> int:
        status = self.process.wait(seconds)
        time.sleep(0.5)
        while not self.lines.empty():
            self.output.append(self.lines.get())
        return status


def partition(kind: str, default: str) -> str:
    return os.environ.get(f"TESTCLUSTER_{kind}_PARTITION", default)


def slurm(*words: str) -> str:
    return subprocess.run(list(words), capture_output=True, text=True, timeout=30).stdout.strip()


def watch_running(job_id: str, found: dict[str, float], stop: threading.Event) -> None:
    """The epoch at which `squeue` first shows the job RUNNING, polled every 0.2 s."""
    while not stop.is_set():
        if slurm("squeue", "-h", "-j", job_id, "-o", "%T") == "RUNNING":
            found[job_id] = time.time()
            return
        time.sleep(0.2)


def join(folder: Path, run_path: Path, nodes: int, minutes: int) -> str:
    done = subprocess.run([sys.executable, "-m", "lamarckian_hpc", "join", str(run_path), "--partition",
                           partition("CPU", "cpu"), "--nodes", str(nodes), "--cpus-per-node", str(ACTORS_PER_NODE),
                           "--time", str(minutes), "--object-store-mb", "100", "--folder", str(folder / "jobs")],
                          capture_output=True, text=True, timeout=120, cwd=folder)
    if done.returncode:
        raise RuntimeError(f"join failed: {done.stdout}{done.stderr}")
    return done.stdout.split("submitted actor job ")[1].split(":")[0]


def start_epoch(run_path: Path, seconds: float) -> float:
    from lamarckian_hpc.storage import open_run

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with open_run(run_path) as run:
                return datetime.datetime.fromisoformat(str(run.meta["start_time"])).timestamp()
        except (OSError, KeyError, ValueError):
            time.sleep(0.5)
    raise RuntimeError(f"{run_path}: no start_time within {seconds} s")


def run_elastic(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """The elastic run; every event's epoch, written to FOLDER/events.json."""
    nodes = common.testcluster_nodes()

    minutes = math.ceil((args.duration + 300) / 60)
    launch = Launch(folder, "elastic", args.duration, [], args.overrides)
    events: dict[str, Any] = {"learner_job": launch.job_id, "jobs": [], "nodes_per_job": args.nodes_per_job,
                              "settings": [str(CONFIG.relative_to(ROOT)), *SETTINGS, *args.overrides],
                              "schedule": {"join_at": args.join_at, "leave_at": args.leave_at,
                                           "kill_at": args.kill_at, "duration": args.duration}}
    stop = threading.Event()
    running: dict[str, float] = {}
    killed_nodes: list[str] = []
    try:
        launch.wait_for(rf"job {launch.job_id}: .*policy version", 300)
        origin = start_epoch(launch.run_path, 60)
        events["start_epoch"] = origin
        print(f"learner job {launch.job_id} training; run start {origin:.1f}", flush=True)
        plan = sorted([(at, "join") for at in args.join_at] + [(at, "leave") for at in args.leave_at]
                      + [(at, "kill") for at in args.kill_at])
        in_run: list[dict[str, Any]] = []
        for at, what in plan:
            time.sleep(max(0.0, origin + at - time.time()))
            if what == "join":
                job = {"job": None, "submitted": time.time()}
                job["job"] = join(folder, launch.run_path, args.nodes_per_job, minutes)
                threading.Thread(target=watch_running, args=(job["job"], running, stop), daemon=True).start()
                events["jobs"].append(job)
                in_run.append(job)
                print(f"t={time.time() - origin:.0f} s: actor job {job['job']} submitted", flush=True)
                continue
            if not in_run:
                raise RuntimeError(f"nothing left to {what} at {at} s")
            job = in_run.pop(0)
            job["nodes"] = slurm("scontrol", "show", "hostnames", slurm("squeue", "-h", "-j", job["job"], "-o", "%N"))
            job["nodes"] = job["nodes"].split()
            if what == "leave":
                job["scancel"] = time.time()
                subprocess.run(["scancel", job["job"]], check=True, timeout=30)
            else:
                job["kill"] = time.time()
                for node in job["nodes"]:
                    nodes.kill_node(node, job["job"])
                    killed_nodes.append(node)
            print(f"t={time.time() - origin:.0f} s: actor job {job['job']} ({' '.join(job['nodes'])}): {what}",
                  flush=True)
        status = launch.finish(args.duration + 600)
        events["launch_status"] = status
    finally:
        stop.set()
        subprocess.run(["scancel", launch.job_id, *[job["job"] for job in events["jobs"]]], timeout=30)
        for node in killed_nodes:
            nodes.restore_node(node)
        for job in events["jobs"]:
            nodes.remove_job_leftovers(job["job"])
    for job in events["jobs"]:
        job["running"] = running.get(job["job"])
    events["learner_restarts_seen"] = sorted({int(m) for m in re.findall(r"\(restart (\d+)\)", "".join(launch.output))})
    events["learner_log"] = str(next((folder / "jobs" / launch.job_id).glob("*_0_log.out"), ""))
    join_folder = launch.run_path.with_suffix(".join")
    events["markers"] = {kind: {name: (join_folder / kind / name).stat().st_mtime
                                for name in sorted(os.listdir(join_folder / kind))}
                         for kind in ("leaving", "left") if (join_folder / kind).is_dir()}
    events["load_average"] = common.load_average()  # at the run's end: how busy the machine was
    events["ended"] = common.now()
    (folder / "events.json").write_text(json.dumps(events, indent=1))
    return events


def run_static(args: argparse.Namespace, folder: Path, jobs: int) -> None:
    name = f"static{jobs}"
    minutes = math.ceil((args.static_seconds + 300) / 60)
    launch = Launch(folder, name, args.static_seconds,
                    ["--actor-jobs", str(jobs), "--actor-partition", partition("CPU", "cpu"), "--actor-nodes",
                     str(args.nodes_per_job), "--actor-cpus-per-node", str(ACTORS_PER_NODE), "--actor-time",
                     str(minutes), "--actor-object-store-mb", "100"], args.overrides)
    actor_jobs: list[str] = []
    try:
        actor_jobs = [launch.wait_for(r"submitted actor job (\d+)", 120).group(1) for _ in range(jobs)]
        status = launch.finish(args.static_seconds + 600)
    finally:
        subprocess.run(["scancel", launch.job_id, *actor_jobs], timeout=30)
    (folder / f"{name}.json").write_text(json.dumps({"jobs": jobs, "status": status, "learner_job": launch.job_id}))


# ---------------------------------------------------------------- reading
def read_series(run_path: Path) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, Any]]:
    from lamarckian_hpc.storage import open_run

    with open_run(run_path) as run:
        series = {}
        for name in METRICS:
            try:
                metric = run.metric(name)
            except KeyError:
                continue
            series[name] = {"t": np.asarray(metric.wall_time, float), "frames": np.asarray(metric.env_frames, float),
                            "value": np.asarray(metric.value, float)}
        meta = dict(run.meta)
    return series, meta


def first_at_least(series: dict[str, np.ndarray], level: float, after: float) -> float | None:
    """Run time of the first update after `after` whose value is at least `level`."""
    hit = np.flatnonzero((series["t"] >= after) & (series["value"] >= level))
    return float(series["t"][hit[0]]) if len(hit) else None


def first_at_most(series: dict[str, np.ndarray], level: float, after: float) -> float | None:
    hit = np.flatnonzero((series["t"] >= after) & (series["value"] <= level))
    return float(series["t"][hit[0]]) if len(hit) else None


def rate(hosts: dict[str, np.ndarray], start: float, end: float) -> float | None:
    """Env frames per second between the first and the last update in [start, end]."""
    inside = np.flatnonzero((hosts["t"] >= start) & (hosts["t"] <= end))
    if len(inside) < 3:
        return None
    first, last = inside[0], inside[-1]
    return float((hosts["frames"][last] - hosts["frames"][first]) / (hosts["t"][last] - hosts["t"][first]))


def windows(series: dict[str, dict[str, np.ndarray]], width: float) -> dict[str, list]:
    """Per window of `width` run seconds from the first update: env frames the learner received in
    it over its length (0 in a window without an update), the largest hosts_connected, and the
    mean and largest of the updates' staleness (none without an update)."""
    hosts, mean, largest = series["hosts_connected"], series["staleness_mean"], series["staleness_max"]
    columns: dict[str, list] = {"start_s": [], "env_steps_per_second": [], "hosts": [], "staleness_mean": [],
                                "staleness_max": [], "updates": []}
    start, end = float(hosts["t"][0]), float(hosts["t"][-1])
    while start < end:
        stop = min(start + width, end)
        inside = (hosts["t"] > start) & (hosts["t"] <= stop)
        # frames counted by the last update at or before each edge
        at_start = hosts["frames"][np.flatnonzero(hosts["t"] <= start)[-1]]
        at_stop = hosts["frames"][np.flatnonzero(hosts["t"] <= stop)[-1]]
        earlier = np.flatnonzero(hosts["t"] <= stop)
        columns["start_s"].append(round(start, 1))
        columns["env_steps_per_second"].append(float((at_stop - at_start) / (stop - start)) if stop > start else None)
        columns["hosts"].append(int(hosts["value"][inside].max()) if inside.any() else int(hosts["value"][earlier[-1]]))
        columns["staleness_mean"].append(float(mean["value"][inside].mean()) if inside.any() else None)
        columns["staleness_max"].append(float(largest["value"][inside].max()) if inside.any() else None)
        columns["updates"].append(int(inside.sum()))
        start += width
    return columns


def static_per_node(path: Path, hosts: int, settle: float) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    series, _ = read_series(path)
    connected = series.get("hosts_connected")
    if connected is None or not len(connected["t"]):
        return {"hosts": hosts, "failed": "no update recorded"}
    everyone = first_at_least(connected, hosts, 0.0)
    if everyone is None:
        return {"hosts": hosts, "failed": f"only {int(connected['value'].max())} hosts said hello"}
    steps = rate(connected, everyone + settle, float(connected["t"][-1]))
    mean = series["staleness_mean"]
    return {"hosts": hosts, "all_hosts_at_s": everyone, "env_steps_per_second": steps,
            "per_node": steps / hosts if steps else None,
            "staleness_mean": float(mean["value"][mean["t"] >= everyone].mean())}


def rises(series: dict[str, np.ndarray]) -> list[float]:
    """Run times of every unit rise of a count, one entry per unit (a rise of 2 in one update: twice)."""
    steps = np.diff(series["value"])
    return [float(series["t"][i + 1]) for i in np.flatnonzero(steps > 0) for _ in range(int(steps[i]))]


def assign(times: list[float], jobs: list[dict[str, Any]], per_job: int, origin: float) -> list[list[float]]:
    """The rises of a count (hosts, joined nodes, placed actors) handed to the actor jobs: the run
    file counts them without naming them, so each rise goes to the earliest job that was RUNNING
    before it, has not left, and has fewer than `per_job` of its own."""
    got: list[list[float]] = [[] for _ in jobs]
    for at in times:
        for number, job in enumerate(jobs):
            running = job.get("running")
            ended = job.get("scancel", job.get("kill"))
            if running is not None and running - origin <= at and len(got[number]) < per_job and \
                    (ended is None or at <= ended - origin):
                got[number].append(at)
                break
    return got


def analyse(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    events = json.loads((folder / "events.json").read_text())
    series, meta = read_series(folder / "runs" / "elastic.h5")
    origin = events["start_epoch"]
    hosts = series["hosts_connected"]
    npj = events["nodes_per_job"]
    jobs = events["jobs"]
    rows: list[dict[str, Any]] = []
    joins, leaves, kills = [], [], []
    hello = assign(rises(hosts), jobs, npj, origin)
    ray_up = assign(rises(series["joined_nodes"]), jobs, npj, origin) if "joined_nodes" in series else None
    placed = assign(rises(series["joined_actors"]), jobs, npj * ACTORS_PER_NODE, origin) \
        if "joined_actors" in series else None

    def since(times: list[float] | None, running: float | None, index: int, whole: int) -> float | None:
        if running is None or not times or len(times) < whole:
            return None
        return times[index] - running

    for number, job in enumerate(jobs):
        running = job["running"] - origin if job.get("running") else None
        joins.append({"job": job["job"], "submitted_s": job["submitted"] - origin, "running_s": running,
                      "first_node_s": hello[number][0] if hello[number] else None,
                      "all_nodes_s": hello[number][-1] if len(hello[number]) == npj else None,
                      "to_first_experience_s": since(hello[number], running, 0, 1),
                      "to_all_nodes_s": since(hello[number], running, -1, npj),
                      "to_ray_nodes_up_s": since(ray_up and ray_up[number], running, -1, npj),
                      "to_actors_placed_s": since(placed and placed[number], running, -1, npj * ACTORS_PER_NODE)})
    for number, job in enumerate(jobs):
        if "scancel" not in job and "kill" not in job:
            continue
        at = job.get("scancel", job.get("kill")) - origin
        before = np.flatnonzero(hosts["t"] < at)
        level = float(hosts["value"][before[-1]]) if len(before) else 1.0
        inside = sum(1 for when in hello[number] if when <= at)
        down = first_at_most(hosts, level - inside, at) if inside else None
        record = {"job": job["job"], "nodes": job["nodes"], "at_s": at, "nodes_in": inside, "hosts_down_s": down,
                  "to_hosts_down_s": None if down is None else down - at}
        if "scancel" in job:
            labels = [f"{node}-job{job['job']}" for node in job["nodes"]]
            left = [events["markers"].get("left", {}).get(label) for label in labels]
            leaving = [events["markers"].get("leaving", {}).get(label) for label in labels]
            record["to_leaving_marker_s"] = max((m - job["scancel"] for m in leaving if m), default=None)
            record["to_left_marker_s"] = None if None in left or not left else max(m - job["scancel"] for m in left)
            leaves.append(record)
        else:
            kills.append(record)
    # throughput per node after each join: from its last node's first update (+ settle) to the
    # next change of the hosts in the run (or a leave, a kill, the run's end)
    changes = hosts["t"][1:][np.diff(hosts["value"]) != 0]
    ends = [r["at_s"] for r in leaves + kills] + [float(hosts["t"][-1])]
    statics = {}
    for path in sorted((folder / "runs").glob("static*.h5")):
        jobs_there = int(path.stem.removeprefix("static"))
        statics[1 + jobs_there * npj] = static_per_node(path, 1 + jobs_there * npj, args.settle)
    per_node = []
    for number, entry in enumerate(joins, 1):
        if entry["all_nodes_s"] is None:
            continue
        level = int(hosts["value"][np.flatnonzero(hosts["t"] >= entry["all_nodes_s"])[0]])
        start = entry["all_nodes_s"] + args.settle
        end = min([float(c) for c in changes if c > entry["all_nodes_s"]]
                  + [e for e in ends if e > entry["all_nodes_s"]])
        steps = rate(hosts, start, end) if end > start else None
        static = statics.get(level)
        per_node.append({"join": number, "hosts": level, "window_s": [start, end], "env_steps_per_second": steps,
                         "per_node": steps / level if steps else None, "static": static,
                         "ratio": steps / level / static["per_node"]
                         if steps and static and static.get("per_node") else None})
    base = rate(hosts, args.settle, joins[0]["submitted_s"]) if joins else None
    table_windows = windows(series, args.window)
    staleness_windows = [v for v in table_windows["staleness_mean"] if v is not None]
    log_text = Path(events["learner_log"]).read_text() if events.get("learner_log") else ""
    starts = len(re.findall(r"^(starting|resuming) ", log_text, re.M))
    restarts = max(events.get("learner_restarts_seen") or [0])

    def row(measure: str, value: float | None, unit: str, goal: str, met: bool | None) -> None:
        rows.append({"measure": measure, "value": None if value is None else round(float(value), 2), "unit": unit,
                     "goal": goal, "met": "-" if met is None else ("yes" if met else "no")})

    row("env steps/s, learner's node alone (before the first join)", base, "steps/s", "", None)
    for number, entry in enumerate(joins, 1):
        value = entry["to_first_experience_s"]
        row(f"join {number}: RUNNING to first experience", value, "s", f"<= {GOALS['join']:.0f} s",
            None if value is None else value <= GOALS["join"])
        row(f"join {number}: RUNNING to its {npj} Ray nodes up", entry["to_ray_nodes_up_s"], "s", "", None)
        row(f"join {number}: RUNNING to its {npj * ACTORS_PER_NODE} actors placed", entry["to_actors_placed_s"],
            "s", "", None)
        value = entry["to_all_nodes_s"]
        row(f"join {number}: RUNNING to all {npj} nodes' experience", value, "s", f"<= {GOALS['join']:.0f} s",
            None if value is None else value <= GOALS["join"])
    for entry in per_node:
        number = entry["join"]
        span = entry["window_s"][1] - entry["window_s"][0]
        row(f"after join {number}: env steps/s per node, {entry['hosts']} nodes "
            f"({f'{span:.0f} s' if span > 0 else 'no steady window: the nodes changed first'})", entry["per_node"],
            "steps/s", "", None)
        if entry["static"] and entry["static"].get("per_node"):
            row(f"static run, {entry['hosts']} nodes from the start: per node", entry["static"]["per_node"],
                "steps/s", "", None)
        row(f"after join {number}: per node, elastic / static", entry["ratio"], "ratio",
            f">= {GOALS['per_node_ratio']}",
            None if entry["ratio"] is None else entry["ratio"] >= GOALS["per_node_ratio"])
    matched = {entry["hosts"] for entry in per_node}
    for size, static in sorted(statics.items()):
        if size not in matched and static and static.get("per_node"):
            row(f"static run, {size} nodes from the start: per node (the elastic run never had {size})",
                static["per_node"], "steps/s", "", None)
    for number, entry in enumerate(leaves, 1):
        value = entry.get("to_left_marker_s")
        row(f"clean leave {number}: scancel to left marker (credits closed)", value, "s",
            f"<= {GOALS['leave']:.0f} s", None if value is None else value <= GOALS["leave"])
        row(f"clean leave {number}: scancel to hosts_connected down", entry["to_hosts_down_s"], "s", "", None)
    for number, entry in enumerate(kills, 1):
        row(f"killed nodes {number}: kill to hosts_connected down", entry["to_hosts_down_s"], "s", "", None)
    worst = max(staleness_windows) if staleness_windows else None
    row(f"staleness mean, worst {args.window:.0f} s window", worst, "versions", f"<= {GOALS['staleness']:.0f}",
        None if worst is None else worst <= GOALS["staleness"])
    row("staleness max, whole run", float(series["staleness_max"]["value"].max()), "versions", "", None)
    row("learner job restarts (Slurm)", restarts, "", "0", restarts == 0)
    row("run's resumes (/meta)", float(meta.get("resumes", 0) or 0), "", "0", not meta.get("resumes"))
    row("driver log 'starting' lines", starts, "", "1", starts == 1)
    for name in ("lost_messages", "credits_written_off", "actor_restarts"):
        if name in series:
            row(f"{name} (end of run)", float(series[name]["value"][-1]), "", "", None)
    updates = {name: {"t": s["t"].round(3).tolist(), "value": s["value"].tolist()}
               for name, s in series.items() if name in ("hosts_connected", "credits_in_flight")}
    updates["env_frames"] = series["hosts_connected"]["frames"].tolist()
    return {"table": rows, "joins": joins, "leaves": leaves, "kills": kills, "per_node": per_node,
            "static": {str(size): static for size, static in statics.items()},
            "windows": table_windows, "updates": updates, "events": events,
            "credit_budget": meta.get("credit_budget"), "learner_job": events["learner_job"]}


def figure(result: dict[str, Any], width: float, label: str) -> Path:
    """docs/benchmarks/figures/elastic.png (elastic_LABEL.png for an entry other than main)."""
    import pandas as pd

    from lamarckian_hpc.analysis.plotting import new_figure, save

    frame = pd.DataFrame(result["windows"])
    updates = result["updates"]
    fig, (steps, nodes) = new_figure(rows=2, width=8.0, height=3.0)
    middle = frame["start_s"] + width / 2
    steps.plot(middle, frame["env_steps_per_second"], "o-", label=f"env steps/s ({width:.0f} s windows)")
    steps.set_ylim(bottom=0)
    steps.set(ylabel="env steps/s")
    nodes.step(updates["hosts_connected"]["t"], updates["hosts_connected"]["value"], where="post", color="C1",
               label="hosts_connected")
    nodes.set(xlabel="seconds since the run's start", ylabel="nodes in the run")
    nodes.yaxis.get_major_locator().set_params(integer=True)
    for axis in (steps, nodes):
        for entry in result["joins"]:
            if entry["running_s"] is not None:
                axis.axvline(entry["running_s"], color="C2", ls="--", lw=1)
        for entry in result["leaves"]:
            axis.axvline(entry["at_s"], color="C3", ls="--", lw=1)
        for entry in result["kills"]:
            axis.axvline(entry["at_s"], color="k", ls=":", lw=1)
        axis.grid(alpha=0.3)
    steps.legend(fontsize=8, loc="lower right")
    nodes.legend(fontsize=8, loc="lower right")
    name = "elastic" if label == common.DEFAULT_LABEL else f"elastic_{label}"
    path = DOCS_FIGURE.with_name(f"{name}.png")  # one copy, beside the page that shows it
    save(fig, path, "Actor jobs join (green: RUNNING), leave (red: scancel) and die (black: killed)", frame)
    return path


def print_table(result: dict[str, Any]) -> None:
    print("\n| measure | value | unit | goal | met |\n|---|---:|---|---|---|")
    for row in result["table"]:
        value = "-" if row["value"] is None else f"{row['value']:,.2f}"
        print(f"| {row['measure']} | {value} | {row['unit']} | {row['goal']} | {row['met']} |")
    w = result["windows"]
    print("\n| window start (s) | hosts | env steps/s | staleness mean | staleness max |\n|---:|---:|---:|---:|---:|")
    for i, start in enumerate(w["start_s"]):
        steps = w["env_steps_per_second"][i]
        mean, largest = w["staleness_mean"][i], w["staleness_max"][i]
        print(f"| {start:.0f} | {w['hosts'][i]} | {'-' if steps is None else f'{steps:,.0f}'} | "
              f"{'-' if mean is None else f'{mean:.2f}'} | {'-' if largest is None else f'{largest:.0f}'} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--join-at", type=float, nargs="+", default=[60.0, 120.0],
                        help="run seconds at which an actor job is submitted (one each)")
    parser.add_argument("--leave-at", type=float, nargs="*", default=[180.0],
                        help="run seconds at which the oldest job still in the run is scancelled")
    parser.add_argument("--kill-at", type=float, nargs="*", default=[240.0],
                        help="run seconds at which the next job's nodes are killed")
    parser.add_argument("--nodes-per-job", type=int, default=2, help="nodes of each actor job (2 actors each)")
    parser.add_argument("--duration", type=float, default=300.0, help="the elastic run's stop.max_wall_seconds")
    parser.add_argument("--static-jobs", type=int, nargs="*", default=None,
                        help="static runs with this many actor jobs from the start (default: 1 .. joins; "
                             "none: no static run)")
    parser.add_argument("--static-seconds", type=float, default=100.0, help="each static run's wall seconds")
    parser.add_argument("--overrides", nargs="*", default=[], metavar="key.path=value",
                        help="more config overrides for every run (after the script's own settings)")
    parser.add_argument("--window", type=float, default=10.0, help="seconds per throughput and staleness window")
    parser.add_argument("--settle", type=float, default=5.0,
                        help="seconds after a join's last node is in before its throughput counts")
    parser.add_argument("--folder", type=Path, help="where the runs and logs go (default: a new temporary folder)")
    parser.add_argument("--analyse", type=Path, metavar="FOLDER", help="read FOLDER of an earlier run again")
    parser.add_argument("--output", type=Path, default=RESULTS)
    common.add_common_args(parser)
    args = parser.parse_args(argv)
    if len(args.leave_at) + len(args.kill_at) > len(args.join_at):
        parser.error("more leaves and kills than joined jobs")
    static_jobs = list(range(1, len(args.join_at) + 1)) if args.static_jobs is None else args.static_jobs
    if args.analyse:
        folder = args.analyse
    else:
        if "SLURM_CONF" not in os.environ or shutil.which("sbatch") is None:
            raise SystemExit("needs the test cluster: slurm/testcluster/start.sh 8, "
                             "then . /var/tmp/lamarckian-testcluster/env")
        folder = args.folder or Path(tempfile.mkdtemp(prefix="elastic-", dir="/var/tmp"))
        folder.mkdir(parents=True, exist_ok=True)
        os.chmod(folder, 0o755)
        print(f"folder: {folder}", flush=True)
        started = time.monotonic()
        run_elastic(args, folder)
        print(f"elastic run done in {time.monotonic() - started:.0f} s", flush=True)
        for jobs in static_jobs:
            started = time.monotonic()
            run_static(args, folder, jobs)
            print(f"static run, {jobs} actor job(s): {time.monotonic() - started:.0f} s", flush=True)
    result = analyse(args, folder)
    drawn = figure(result, args.window, args.label)
    print_table(result)
    quota = {key: os.environ.get(f"TESTCLUSTER_{key}") for key in
             ("NODE_CPUS", "LEARNER_CPUS", "CPU_PERIOD_US", "CPU_SHARES", "CPU_QUOTA_SCOPE", "NODE_ADDRS")}
    common.write_results(args.output, {
        **result, "settings": result["events"].get("settings"), "window_s": args.window,
        "settle_s": args.settle, "static_seconds": args.static_seconds, "static_jobs": static_jobs,
        "testcluster": quota,
        "cluster_nodes": len(quota["NODE_ADDRS"].split(",")) if quota["NODE_ADDRS"] else None,
        "folder": str(folder), "cores": os.cpu_count(), "elastic_run_ended": result["events"].get("ended"),
        # the machine's load when the elastic run ended, not when it was read again (--analyse)
        **({"machine": {"load_average": result["events"]["load_average"]}}
           if result["events"].get("load_average") else {})}, args.label)
    print(f"\nwritten: {args.output}, {drawn}, {DOCS_FIGURE.with_name(drawn.name)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
