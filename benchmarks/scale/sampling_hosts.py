"""Sampling across hosts that are really apart: env steps per second against the number of hosts.

The shape of the Lamarckian paper's Figure 7, with hosts emulated on one machine (root and
iproute2 needed): every host is a network namespace of `netem.emulated_hosts`, with its own
address, its own loopback, its own host name and a link limited to `--rate` in both directions,
so everything the learner and the actors exchange crosses those links. For each host count H:

- a Ray head in host 0 and a Ray worker in each other host, `--actors-per-host` CPUs each, joined
  with token authentication as a cluster's nodes are, in waves (1, 2, 4, 4, ... nodes, each once
  the one before is up: 16 nodes started at once on 2 cores miss Ray's registration window);
- with `--host-cpus C`, every host's own cores: a cgroup v1 cpu group per host holding C cores
  (`cpu_groups.py`), named to that host's Ray node in `LAMARCKIAN_HPC_CPU_CGROUP`, which its actors
  join; with `--learner-cpus L` one for the learner (`LAMARCKIAN_HPC_LEARNER_CPU_CGROUP`). Ray's
  daemons and the relays stay outside. Without them all hosts share the machine's cores;
- for each `--broadcast` layout, one `lamarckian-hpc train` run in host 0 that joins that cluster
  (`runtime.ray_address`), with H x `--actors-per-host` actors and the sampling setup of
  `sampling.py` (asynchronous PPO, (256, 128) model, 8 envs per actor, a learner update made cheap
  on purpose so that the figure measures the actors). The figure is the env frames sampled per
  wall second from the first update at which every host had said hello (the run file's metric
  `hosts_connected`) to the last, beside the run's staleness (mean over those updates of each
  update's mean, and the largest) and the efficiency against one host (steps/s over hosts x the
  1-host steps/s of the same layout). A run in which a host never said hello fails its point;
  /meta's `actors_per_node` and `broadcast_layout` are recorded beside;
- the broadcast's per-hop costs across the same hosts, with the real publisher, relay and
  subscriber code (`broadcast.py`'s `measure_zmq`): a `--megabytes` blob to `--link-receivers`
  receivers per host, flat and tree. `scale_model.py` is calibrated on these.

Beside it the raw bound of this machine (`sampling.py`'s `measure_raw`: one process, the same
envs and model, no learning), measured before and after the sweep. Without `--host-cpus` all hosts
share this machine's cores; with it each host's actor has cores of its own, while Ray's daemons
and the relays share what the quotas leave. Each point records how busy the machine was, how many
cores other work, outside the benchmark's own processes, took meanwhile, how often each quota
throttled its group (the learner's near 1: the learner was the ceiling) and the learner's own CPU
over the window (cores, microseconds per frame: `scale_model.py`'s learner ceiling); a run
(or raw bound) during which other work took more than `--quiet-cores` is made again, up to
`--retries` times, and the quietest attempt is the point, all attempts kept in the JSON.

    python benchmarks/scale/sampling_hosts.py [--hosts 1 2 4] [--broadcast flat tree] [--rate 1gbit] [--seconds 40]
                                        [--host-cpus 0.05 --learner-cpus 0.5] [--seconds-per-host 2]

Prints a Markdown table and writes benchmarks/results/sampling_hosts.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import common
from benchmarks.scale import netem
from benchmarks.scale.cpu_groups import QuotaMeter, cpu_groups
from benchmarks.scale.other_work import OtherWork
from benchmarks.scale.ray_hosts import RayCluster, on_host, ray_env
from benchmarks.scale.sampling import measure_raw, run_config  # sets one thread per process

HERE = Path(__file__).resolve().parent

RESULTS = HERE.parent / "results" / "sampling_hosts.json"


# ---------------------------------------------------------------- one training run in host 0
def train_config(args: argparse.Namespace, hosts: int, broadcast: str, address: str, folder: Path,
                 name: str) -> dict[str, Any]:
    config = run_config(args.env, hosts * args.actors_per_host, args.num_envs, args.batch_size, 10**9)
    tree = config.model_dump(mode="json")
    tree["runtime"].update(ray_address=address, broadcast=broadcast, transport_security=args.security)
    # Start-up (Ray's workers, the actors' imports at a host's quota) grows with the hosts: the
    # extra seconds keep the steady window after the last hello about as long at every host count.
    tree["stop"].update(max_wall_seconds=run_seconds(args, hosts), target_return=None)
    tree["storage"].update(directory=str(folder), run_name=name, checkpoint_interval_seconds=None)
    return tree


def run_seconds(args: argparse.Namespace, hosts: int) -> float:
    return args.seconds + args.seconds_per_host * hosts


def read_run(path: Path, hosts: int) -> dict[str, Any]:
    """The figures of one run file: steady-state sampling rate, staleness, who contributed.

    The window opens at the end of the first update at which every host had said hello (the
    metric `hosts_connected`, distinct hosts, recorded with every update): Ray's and the actors'
    start-up, and the updates made before the last host joined, fall before it and are left out."""
    from lamarckian_hpc.storage import open_run

    with open_run(path) as run:
        meta, summary = run.meta, run.summary()
        mean, largest = run.metric("staleness_mean"), run.metric("staleness_max")
        connected = run.metric("hosts_connected")
    hosts_seen = int(connected.value.max()) if len(connected) else 0
    everyone = np.flatnonzero(connected.value >= hosts)
    first = int(everyone[0]) if len(everyone) else len(mean)
    if hosts_seen < hosts or len(mean) - first < 3:
        raise RuntimeError(f"{path}: {len(mean) - first} updates with all {hosts} hosts (at most {hosts_seen} "
                           f"said hello, actors per node {meta.get('actors_per_node')}); raise --seconds")
    frames = int(mean.env_frames[-1] - mean.env_frames[first])
    seconds = float(mean.wall_time[-1] - mean.wall_time[first])
    return {
        "steps_per_second": frames / seconds, "measured_frames": frames, "measured_seconds": seconds,
        "updates": len(mean) - first, "update_interval_s": seconds / (len(mean) - 1 - first),
        "staleness_mean": float(mean.value[first + 1:].mean()),
        "staleness_max": float(largest.value[first + 1:].max()),
        "staleness_per_update": [float(v) for v in mean.value], "first_update_wall_s": float(mean.wall_time[0]),
        "all_hosts_wall_s": float(mean.wall_time[first]), "last_update_wall_s": float(mean.wall_time[-1]),
        "total_frames": summary.env_frames,
        "wall_seconds": summary.wall_time_seconds, "closed_cleanly": summary.closed_cleanly,
        "hosts_connected": hosts_seen, "actors_per_node": meta.get("actors_per_node") or {},
        "broadcast_layout": meta.get("broadcast_layout"), "all_hosts_contributed": hosts_seen >= hosts,
        "learner_experience_connections": meta.get("learner_experience_connections"),
        "start_epoch": datetime.datetime.fromisoformat(str(meta["start_time"])).timestamp(),
    }


def measure_training(args: argparse.Namespace, hosts: int, broadcast: str, cluster: RayCluster, folder: Path,
                     name: str) -> dict:
    config_path = folder / f"{name}.yaml"
    config_path.write_text(json.dumps(train_config(args, hosts, broadcast, cluster.address, folder, name), indent=1))
    command = on_host(0, [sys.executable, "-m", "lamarckian_hpc", "train", str(config_path)])
    groups = {"hosts": cluster.groups, "learner": [cluster.learner_group] if cluster.learner_group else []}
    quota = QuotaMeter(groups)
    other = OtherWork()
    started = time.monotonic()
    # nsenter, unshare and sh exec: the process started is the learner's own.
    learner = subprocess.Popen(command, env={**cluster.env, **cluster.learner_env}, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    quota.watch(learner.pid)
    try:
        _, stderr = learner.communicate(timeout=run_seconds(args, hosts) + 300)
    except subprocess.TimeoutExpired:
        learner.kill()
        learner.communicate()
        raise
    ended, ended_epoch = time.monotonic(), time.time()
    cpu = other.finish()
    quota.finish()
    if learner.returncode:
        raise RuntimeError(f"train, {hosts} hosts, {broadcast}: exit {learner.returncode}\n{stderr[-3000:]}")
    run = read_run(folder / f"{name}.h5", hosts)
    # The steady window in this clock: the run file's times count from /meta's start_time.
    origin = ended - (ended_epoch - run.pop("start_epoch"))
    quotas = quota.window(origin + run["all_hosts_wall_s"], origin + run["last_update_wall_s"])
    return {**run, "process_seconds": ended - started, **cpu,
            "learner_throttled_share": quotas["learner"][0]["throttled_share"] if quotas["learner"] else None,
            "host_throttled_share": statistics.fmean(q["throttled_share"] for q in quotas["hosts"])
            if quotas["hosts"] else None,
            # Shares only (no records): the pages' renderer shows the longest list of records, the table.
            "host_throttled_shares": [q["throttled_share"] for q in quotas["hosts"]],
            # The learner's own CPU per frame of the window (its update, ingest and Ray's driver threads):
            # what the learner ceiling of scale_model.py is made of.
            "learner_cores": quotas["process_cpu_seconds"] / max(quotas["span_seconds"], 1e-9),
            "learner_cpu_us_per_frame": 1e6 * quotas["process_cpu_seconds"] / max(
                run["steps_per_second"] * quotas["span_seconds"], 1e-9)}


def quietest_run(args: argparse.Namespace, hosts: int, broadcast: str, cluster: RayCluster, folder: Path) -> dict:
    """The run that other work disturbed least: on a shared machine a run during which others took
    more than --quiet-cores is made again, up to --retries times; every attempt is kept. A run that
    fails (a host that never said hello, too few updates) is an attempt too; when every attempt
    failed the point says why (`failed`) and has no figures."""
    attempts, failures = [], []
    for attempt in range(1 + args.retries):
        try:
            run = measure_training(args, hosts, broadcast, cluster, folder, f"h{hosts}-{broadcast}-{attempt}")
        except (RuntimeError, subprocess.TimeoutExpired) as error:
            failures.append(str(error).splitlines()[0])
            print(f"{hosts} host(s), {broadcast}, attempt {attempt + 1} failed: {failures[-1]}", flush=True)
            continue
        attempts.append(run)
        print(f"{hosts} host(s), {broadcast}, attempt {attempt + 1}: {run['steps_per_second']:,.0f} steps/s, "
              f"staleness {run['staleness_mean']:.2f} (max {run['staleness_max']:.0f}), other work "
              f"{run['other_cores']:.2f} cores, hosts {run['hosts_connected']}, actors per node "
              f"{run['actors_per_node']}, {run['broadcast_layout']} layout, learner throttled in "
              f"{run['learner_throttled_share'] or 0:.0%} of its periods, learner {run['learner_cores']:.2f} cores "
              f"({run['learner_cpu_us_per_frame']:.1f} us per frame)", flush=True)
        if run["other_cores"] <= args.quiet_cores:
            break
    if not attempts:
        return {"failed": "; ".join(failures), "all_hosts_contributed": False, "attempts": []}
    best = min(attempts, key=lambda run: run["other_cores"])
    keys = ("steps_per_second", "staleness_mean", "staleness_max", "update_interval_s", "other_cores",
            "learner_throttled_share", "learner_cores")
    return {**best, "attempts": [{key: run[key] for key in keys} for run in attempts], "failed_attempts": failures}


def quietest_raw(args: argparse.Namespace, config: Any) -> dict[str, Any]:
    """The raw bound, made again as a disturbed run is."""
    attempts = []
    for _ in range(1 + args.retries):
        other = OtherWork()
        rate = measure_raw(config, args.raw_frames)
        attempts.append({"steps_per_second": rate, "other_cores": other.finish()["other_cores"]})
        if attempts[-1]["other_cores"] <= args.quiet_cores:
            break
    return {**min(attempts, key=lambda attempt: attempt["other_cores"]), "attempts": attempts}


# ---------------------------------------------------------------- per-hop costs across the hosts
def measure_links(args: argparse.Namespace, hosts: int) -> list[dict[str, Any]]:
    """Flat and tree latency of a blob to every receiver, run as the learner in host 0."""
    spec = {"hosts": hosts, "receivers_per_host": args.link_receivers, "megabytes": args.megabytes,
            "reps": args.reps, "warmup": 2, "pause": 0.1, "curve": args.security == "curve"}
    command = ["nsenter", f"--net=/run/netns/{netem.namespaces(hosts)[0]}", sys.executable, __file__,
               "--links-inside", json.dumps(spec)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    for line in done.stdout.splitlines():
        if line.startswith("LINKS "):
            return json.loads(line.removeprefix("LINKS "))
    raise RuntimeError(f"link measurement, {hosts} hosts: exit {done.returncode}\n{done.stderr[-3000:]}")


def links_inside(spec: dict[str, Any]) -> None:
    from benchmarks.scale import broadcast  # its node processes, publisher and relays: the runtime's own classes

    hosts = spec["hosts"]
    workdir = tempfile.mkdtemp(prefix="lhpc-sh-")
    os.chmod(workdir, 0o777)
    rows = []
    try:
        for per_host in spec["receivers_per_host"]:
            options = argparse.Namespace(per_node=per_host, **{k: spec[k] for k in ("megabytes", "reps", "warmup",
                                                                                   "pause", "curve")})
            row: dict[str, Any] = {"receivers_per_host": per_host, "receivers": hosts * per_host}
            for mode in ("flat", "tree"):
                samples = broadcast.measure_zmq(mode, hosts * per_host, options, netem.addresses(hosts), workdir,
                                                netem.namespaces(hosts))
                row[f"{mode}_s"] = samples
                row[f"{mode}_median_ms"] = 1000 * statistics.median(samples)
            rows.append(row)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print("LINKS " + json.dumps(rows), flush=True)


# ---------------------------------------------------------------- driver
def git_commit() -> dict[str, Any]:
    def git(*words: str) -> str:
        return subprocess.run(["git", *words], cwd=HERE.parents[1], capture_output=True, text=True).stdout.strip()
    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def ray_version() -> str:
    import ray

    return ray.__version__


def weight_bytes(args: argparse.Namespace) -> int:
    from lamarckian_hpc.runtime.algorithms import make_learner
    from lamarckian_hpc.runtime.run_shape import spaces_of

    config = run_config(args.env, 1, args.num_envs, args.batch_size, 10**9)
    return int(sum(array.nbytes for array in make_learner(config, *spaces_of(config)).weights().values()))


def table_rows(points: list[dict[str, Any]], raw: dict[str, Any], host_cpus: float | None) -> list[dict[str, Any]]:
    """The page's table: one row per point that has figures. `efficiency` is steps/s over hosts x
    the 1-host steps/s of the same layout (1.0 is linear); `ratio to raw` compares with the raw
    bound of one process scaled to the cores the actors had (hosts x --host-cpus, or one core each)."""
    one = {p["broadcast"]: p["steps_per_second"] for p in points if p["hosts"] == 1 and "failed" not in p}
    rows = []
    for p in points:
        if "failed" in p:
            continue
        cores = p["hosts"] * (host_cpus or 1.0)
        rows.append({"hosts": p["hosts"], "broadcast": p["broadcast"], "actors": p["actors"],
                     "env steps/s": p["steps_per_second"], "per host": p["steps_per_second"] / p["hosts"],
                     "efficiency": p["steps_per_second"] / (p["hosts"] * one[p["broadcast"]])
                     if p["broadcast"] in one else None,
                     "staleness mean": p["staleness_mean"], "staleness max": p["staleness_max"],
                     "s per update": p["update_interval_s"], "actor cores": cores,
                     "ratio to raw": p["steps_per_second"] / (raw["steps_per_second"] * cores),
                     "learner throttled": p.get("learner_throttled_share"), "learner cores": p.get("learner_cores"),
                     "machine CPU busy": p["machine_cpu_busy"], "other work (cores)": p["other_cores"]})
    return rows


def print_table(table: list[dict[str, Any]], raw: dict[str, float], args: argparse.Namespace) -> None:
    quota = (f"{args.host_cpus} cores per host" if args.host_cpus else "no host quota") + ", " + \
        (f"learner {args.learner_cpus} cores" if args.learner_cpus else "no learner quota")
    print(f"\n{args.env}, {args.num_envs} envs per actor, {args.actors_per_host} actor(s) per host, {quota}, "
          f"{args.rate} links; raw bound {raw['steps_per_second']:,.0f} steps/s per core "
          f"(before {raw['before']:,.0f}, after {raw['after']:,.0f}); {os.cpu_count()} cores in all\n")
    print("| hosts | broadcast | env steps/s | per host | efficiency | staleness mean | staleness max | "
          "s per update | ratio to raw | learner cores | learner throttled | other work (cores) |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in table:
        efficiency = f"{row['efficiency']:.0%}" if row["efficiency"] is not None else "-"
        learner = f"{row['learner throttled']:.0%}" if row["learner throttled"] is not None else "-"
        print(f"| {row['hosts']} | {row['broadcast']} | {row['env steps/s']:,.0f} | {row['per host']:,.0f} | "
              f"{efficiency} | {row['staleness mean']:.2f} | {row['staleness max']:.0f} | {row['s per update']:.3f} | "
              f"{row['ratio to raw']:.2f} | {row['learner cores'] or 0:.2f} | {learner} | "
              f"{row['other work (cores)']:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[1, 2, 4], help="host counts to sweep")
    parser.add_argument("--broadcast", nargs="+", choices=["flat", "tree"], default=["flat", "tree"])
    parser.add_argument("--rate", default="1gbit", help="every host's link, each direction (tc tbf rate)")
    parser.add_argument("--seconds", type=float, default=40.0, help="wall seconds of each training run")
    parser.add_argument("--seconds-per-host", type=float, default=0.0,
                        help="extra wall seconds per host of each run, for the longer start-up of many hosts")
    parser.add_argument("--actors-per-host", type=int, default=1, help="also the CPUs of each Ray node")
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--num-envs", type=int, default=8, help="environments per actor process")
    parser.add_argument("--batch-size", type=int, default=4096, help="frames per (cheap) learner update")
    parser.add_argument("--raw-frames", type=int, default=30_000, help="env frames per raw-bound measurement")
    parser.add_argument("--quiet-cores", type=float, default=0.25,
                        help="a run during which other work took more cores than this is made again")
    parser.add_argument("--retries", type=int, default=2, help="most extra attempts of a disturbed run")
    parser.add_argument("--security", choices=["none", "curve"], default="none",
                        help="runtime.transport_security of the runs and the link measurement")
    parser.add_argument("--link-receivers", type=int, nargs="+", default=[1, 2, 4], help="receivers per host")
    parser.add_argument("--megabytes", type=int, default=4, help="blob of the link measurement")
    parser.add_argument("--reps", type=int, default=10, help="timed versions per link measurement")
    parser.add_argument("--no-links", action="store_true", help="leave out the link measurement")
    parser.add_argument("--link-hosts", type=int, nargs="+", default=None,
                        help="host counts that get the link measurement (default: all of --hosts)")
    parser.add_argument("--host-cpus", type=float, default=None,
                        help="every host's own cores: a CFS quota its actors join (default: none, shared cores)")
    parser.add_argument("--learner-cpus", type=float, default=None,
                        help="the learner's own cores, a quota of its own (default: none)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--links-inside", help=argparse.SUPPRESS)
    common.add_common_args(parser)
    args = parser.parse_args()
    if args.links_inside:
        return links_inside(json.loads(args.links_inside))
    if os.geteuid() != 0:
        raise SystemExit("emulated hosts need root (network namespaces, tc)")

    import torch

    torch.set_num_threads(1)
    load_before, started = list(os.getloadavg()), time.strftime("%Y-%m-%dT%H:%M:%S")
    raw_config = run_config(args.env, 1, args.num_envs, args.batch_size, args.raw_frames)
    raw_before = quietest_raw(args, raw_config)
    points, links = [], []
    runs = Path(tempfile.mkdtemp(prefix="lhs-runs-"))
    try:
        for hosts in args.hosts:
            with netem.emulated_hosts(hosts, args.rate) as addresses, \
                    cpu_groups(hosts, args.host_cpus, args.learner_cpus) as (groups, learner_group):
                if not args.no_links and hosts in (args.link_hosts or args.hosts):
                    links.append({"hosts": hosts, "by_receivers_per_host": measure_links(args, hosts)})
                    print(f"{hosts} host(s), links: " + ", ".join(
                        f"{r['receivers']} receivers flat {r['flat_median_ms']:.1f} ms, tree "
                        f"{r['tree_median_ms']:.1f} ms" for r in links[-1]["by_receivers_per_host"]), flush=True)
                cluster = RayCluster(addresses, args.actors_per_host, ray_env(), groups, learner_group)
                try:
                    cluster.start()
                    print(f"{hosts} host(s): Ray up in {cluster.join_seconds:.1f} s", flush=True)
                    for broadcast in args.broadcast:
                        points.append({"hosts": hosts, "broadcast": broadcast, "actors": hosts * args.actors_per_host,
                                       "ray_join_seconds": cluster.join_seconds,
                                       **quietest_run(args, hosts, broadcast, cluster, runs)})
                finally:
                    cluster.stop()
    finally:
        shutil.rmtree(runs, ignore_errors=True)
    raw_after = quietest_raw(args, raw_config)
    load_after = list(os.getloadavg())
    raw = {"before": raw_before["steps_per_second"], "after": raw_after["steps_per_second"],
           "steps_per_second": (raw_before["steps_per_second"] + raw_after["steps_per_second"]) / 2,
           "attempts_before": raw_before["attempts"], "attempts_after": raw_after["attempts"],
           "frames": args.raw_frames}
    table = table_rows(points, raw, args.host_cpus)
    print_table(table, raw, args)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    # "table" first: the pages' generic renderer shows the first of the longest lists of records.
    common.write_results(args.output, {
        "table": table, **git_commit(), "date": started, "cores": os.cpu_count(),
        "torch": torch.__version__, "ray": ray_version(),
        "load_average": load_before, "load_average_after": load_after, "rate": args.rate, "seconds": args.seconds,
        "seconds_per_host": args.seconds_per_host,
        "env": args.env, "num_envs": args.num_envs, "batch_size": args.batch_size,
        "actors_per_host": args.actors_per_host, "security": args.security, "quiet_cores": args.quiet_cores,
        "retries": args.retries, "model": [256, 128], "host_cpus": args.host_cpus,
        "learner_cpus": args.learner_cpus,
        "quota_cores": (args.host_cpus or 0) * max(args.hosts) + (args.learner_cpus or 0),
        "weight_bytes": weight_bytes(args), "raw": raw, "points": points,
        "links": {"megabytes": args.megabytes, "reps": args.reps, "rate": args.rate, "security": args.security,
                  "hosts": links},
    }, args.label)
    print(f"\nload average before {', '.join(f'{v:.2f}' for v in load_before)}, "
          f"after {', '.join(f'{v:.2f}' for v in load_after)}\nwritten: {args.output}")
    missing = [f"{p['hosts']} hosts {p['broadcast']}: {p.get('failed') or p['actors_per_node']}" for p in points
               if not p["all_hosts_contributed"]]
    if missing:
        raise SystemExit("not every host contributed: " + "; ".join(missing))


if __name__ == "__main__":
    main()
