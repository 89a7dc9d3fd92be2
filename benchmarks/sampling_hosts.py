"""Sampling across hosts that are really apart: env steps per second against the number of hosts.

The shape of the Lamarckian paper's Figure 7, with hosts emulated on one machine (root and
iproute2 needed): every host is a network namespace of `netem.emulated_hosts`, with its own
address, its own loopback, its own host name and a link limited to `--rate` in both directions,
so everything the learner and the actors exchange crosses those links. For each host count H:

- a Ray head in host 0 and a Ray worker in each other host, `--actors-per-host` CPUs each, joined
  with token authentication as a cluster's nodes are;
- for each `--broadcast` layout, one `lamarckian-hpc train` run in host 0 that joins that cluster
  (`runtime.ray_address`), with H x `--actors-per-host` actors and the sampling setup of
  `sampling.py` (asynchronous PPO, (256, 128) model, 8 envs per actor, a learner update made cheap
  on purpose so that the figure measures the actors). The figure is the env frames sampled per
  wall second after the first update, from the run file, beside the run's staleness (mean over
  updates of each update's mean, and the largest, the first update left out) and the hosts its
  actors said hello from (`actors_connected_per_host`): every host must have contributed;
- the broadcast's per-hop costs across the same hosts, with the real publisher, relay and
  subscriber code (`broadcast.py`'s `measure_zmq`): a `--megabytes` blob to `--link-receivers`
  receivers per host, flat and tree. `scale_model.py` is calibrated on these.

Beside it the raw bound of this machine (`sampling.py`'s `measure_raw`: one process, the same
envs and model, no learning), measured before and after the sweep. All hosts still share this
machine's cores: the links are apart, the CPUs are not. Each point records how busy the machine
was and how many cores other work, outside the benchmark's own processes, took meanwhile; a run
(or raw bound) during which other work took more than `--quiet-cores` is made again, up to
`--retries` times, and the quietest attempt is the point, all attempts kept in the JSON.

    python benchmarks/sampling_hosts.py [--hosts 1 2 4] [--broadcast flat tree] [--rate 1gbit] [--seconds 40]

Prints a Markdown table and writes benchmarks/results/sampling_hosts.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import netem  # noqa: E402
from sampling import machine_busy_seconds, measure_raw, run_config  # noqa: E402  (sets one thread per process)

RESULTS = HERE / "results" / "sampling_hosts.json"
RAY = str(Path(sys.executable).with_name("ray"))
HEAD_PORT = 46479
START_TIMEOUT_S = 180.0


# ---------------------------------------------------------------- one emulated host
def on_host(index: int, command: list[str]) -> list[str]:
    """`command` in emulated host `index`: its network namespace and a host name of its own, which
    its actors report in their hello. nsenter rather than `ip netns exec`, which remounts /sys
    and so hides the cgroups Ray's raylet reads."""
    namespace = netem.namespaces(index + 1)[index]
    return ["nsenter", f"--net=/run/netns/{namespace}", "unshare", "--uts", "sh", "-c",
            f'hostname {namespace} && exec "$@"', "sh", *command]


def ray_env() -> dict[str, str]:
    """One token for the whole cluster and every driver that joins it."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("RAY_")}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32), RAY_USAGE_STATS_ENABLED="0")
    return env


class RayCluster:
    """A Ray head in host 0 and a worker in every other host, each with `cpus` CPUs."""

    def __init__(self, addresses: list[str], cpus: int, env: dict[str, str]) -> None:
        self.addresses, self.cpus, self.env = addresses, cpus, env
        # Short: Ray's Unix socket paths sit about 75 characters below it and may not pass 107 bytes.
        self.temp = tempfile.mkdtemp(prefix="lhs-", dir="/tmp")
        self.processes: list[subprocess.Popen] = []
        self.logs: list[list[str]] = []

    @property
    def address(self) -> str:
        return f"{self.addresses[0]}:{HEAD_PORT}"

    def _start(self, index: int, role: list[str]) -> threading.Event:
        command = [RAY, "start", "--block", "--disable-usage-stats", f"--node-ip-address={self.addresses[index]}",
                   f"--num-cpus={self.cpus}", "--object-store-memory=104857600", f"--temp-dir={self.temp}/{index}",
                   *role]
        process = subprocess.Popen(on_host(index, command), env=self.env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)
        self.processes.append(process)
        lines: list[str] = []
        self.logs.append(lines)
        started = threading.Event()

        def read() -> None:  # `ray start --block` says so once the node has joined, then keeps running
            for line in process.stdout:
                lines.append(line)
                if "Ray runtime started" in line:
                    started.set()
        threading.Thread(target=read, daemon=True).start()
        return started

    def _wait(self, index: int, started: threading.Event) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not started.wait(0.5):
            if self.processes[index].poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Ray node in host {index} did not start:\n{''.join(self.logs[index])[-3000:]}")

    def start(self) -> None:
        self._wait(0, self._start(0, ["--head", f"--port={HEAD_PORT}", "--include-dashboard=false"]))
        events = [self._start(i, [f"--address={self.address}"]) for i in range(1, len(self.addresses))]
        for index, started in enumerate(events, start=1):
            self._wait(index, started)

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()  # `ray start --block` stops its node's processes on SIGTERM
        for process in self.processes:
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
        shutil.rmtree(self.temp, ignore_errors=True)


# ---------------------------------------------------------------- one training run in host 0
def train_config(args: argparse.Namespace, hosts: int, broadcast: str, address: str, folder: Path,
                 name: str) -> dict[str, Any]:
    config = run_config(args.env, hosts * args.actors_per_host, args.num_envs, args.batch_size, 10**9)
    tree = config.model_dump(mode="json")
    tree["runtime"].update(ray_address=address, broadcast=broadcast, transport_security=args.security)
    tree["stop"].update(max_wall_seconds=args.seconds, target_return=None)
    tree["storage"].update(directory=str(folder), run_name=name, checkpoint_interval_seconds=None)
    return tree


def read_run(path: Path, hosts: int) -> dict[str, Any]:
    """The figures of one run file: steady-state sampling rate, staleness, who contributed."""
    from lamarckian_hpc.storage import open_run

    with open_run(path) as run:
        meta, summary = run.meta, run.summary()
        mean, largest = run.metric("staleness_mean"), run.metric("staleness_max")
    if len(mean) < 3:
        raise RuntimeError(f"{path}: only {len(mean)} updates; raise --seconds")
    # Row 0 is the end of the first update: Ray's and the actors' start-up and the first batch
    # fall before it and are left out, as sampling.py does.
    frames = int(mean.env_frames[-1] - mean.env_frames[0])
    seconds = float(mean.wall_time[-1] - mean.wall_time[0])
    per_host = meta.get("actors_connected_per_host") or {}
    return {
        "steps_per_second": frames / seconds, "measured_frames": frames, "measured_seconds": seconds,
        "updates": len(mean), "update_interval_s": seconds / (len(mean) - 1),
        "staleness_mean": float(mean.value[1:].mean()), "staleness_max": float(largest.value[1:].max()),
        "staleness_per_update": [float(v) for v in mean.value], "first_update_wall_s": float(mean.wall_time[0]),
        "total_frames": summary.env_frames, "wall_seconds": summary.wall_time_seconds,
        "closed_cleanly": summary.closed_cleanly, "actors_connected_per_host": per_host,
        "all_hosts_contributed": sorted(per_host) == sorted(netem.namespaces(hosts)),
    }


class OtherWork:
    """CPU seconds that processes outside this benchmark's own tree (its Ray nodes, the training
    run, the actors, the relays) use while it runs: on a shared machine, what tells a point that
    other work slowed down from a clean one."""

    def __init__(self) -> None:
        from lamarckian_hpc.runtime.process_stats import TreeCpuMeter

        self.meter = TreeCpuMeter(1)
        self.own = 0.0
        self.start_busy, self.start_total = machine_busy_seconds()
        self.started = self.last = time.monotonic()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        now = time.monotonic()
        self.own += self.meter.sample() * (now - self.last)  # sample(): own CPU seconds per second
        self.last = now

    def _run(self) -> None:
        while not self.stop.wait(1.0):  # often enough to see processes that live a few seconds
            self._sample()

    def finish(self) -> dict[str, float]:
        self.stop.set()
        self.thread.join()
        self._sample()
        busy, total = machine_busy_seconds()
        wall = max(self.last - self.started, 1e-9)
        return {"machine_cpu_busy": (busy - self.start_busy) / max(total - self.start_total, 1e-9),
                "own_cores": self.own / wall, "other_cores": max(busy - self.start_busy - self.own, 0.0) / wall,
                "load_average_at_end": list(os.getloadavg())}


def measure_training(args: argparse.Namespace, hosts: int, broadcast: str, cluster: RayCluster, folder: Path,
                     name: str) -> dict:
    config_path = folder / f"{name}.yaml"
    config_path.write_text(json.dumps(train_config(args, hosts, broadcast, cluster.address, folder, name), indent=1))
    command = on_host(0, [sys.executable, "-m", "lamarckian_hpc", "train", str(config_path)])
    other = OtherWork()
    started = time.monotonic()
    done = subprocess.run(command, env=cluster.env, capture_output=True, text=True, timeout=args.seconds + 300)
    elapsed = time.monotonic() - started
    cpu = other.finish()
    if done.returncode:
        raise RuntimeError(f"train, {hosts} hosts, {broadcast}: exit {done.returncode}\n{done.stderr[-3000:]}")
    return {**read_run(folder / f"{name}.h5", hosts), "process_seconds": elapsed, **cpu}


def quietest_run(args: argparse.Namespace, hosts: int, broadcast: str, cluster: RayCluster, folder: Path) -> dict:
    """The run that other work disturbed least: on a shared machine a run during which others took
    more than --quiet-cores is made again, up to --retries times; every attempt is kept."""
    attempts = []
    for attempt in range(1 + args.retries):
        run = measure_training(args, hosts, broadcast, cluster, folder, f"h{hosts}-{broadcast}-{attempt}")
        attempts.append(run)
        print(f"{hosts} host(s), {broadcast}, attempt {attempt + 1}: {run['steps_per_second']:,.0f} steps/s, "
              f"staleness {run['staleness_mean']:.2f} (max {run['staleness_max']:.0f}), other work "
              f"{run['other_cores']:.2f} cores, actors per host {run['actors_connected_per_host']}", flush=True)
        if run["other_cores"] <= args.quiet_cores:
            break
    best = min(attempts, key=lambda run: run["other_cores"])
    keys = ("steps_per_second", "staleness_mean", "staleness_max", "update_interval_s", "other_cores")
    return {**best, "attempts": [{key: run[key] for key in keys} for run in attempts]}


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
    import broadcast  # noqa: E402  (its node processes, publisher and relays: the runtime's own classes)

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
        return subprocess.run(["git", *words], cwd=HERE.parent, capture_output=True, text=True).stdout.strip()
    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def ray_version() -> str:
    import ray

    return ray.__version__


def weight_bytes(args: argparse.Namespace) -> int:
    from lamarckian_hpc.runtime.learner import make_learner
    from lamarckian_hpc.runtime.sampling import spaces_of

    config = run_config(args.env, 1, args.num_envs, args.batch_size, 10**9)
    return int(sum(array.nbytes for array in make_learner(config, *spaces_of(config)).weights().values()))


def print_table(table: list[dict[str, Any]], raw: dict[str, float], args: argparse.Namespace) -> None:
    print(f"\n{args.env}, {args.num_envs} envs and 1 CPU per actor, {args.actors_per_host} actor(s) per host, "
          f"{args.rate} links; raw bound {raw['steps_per_second']:,.0f} steps/s "
          f"(before {raw['before']:,.0f}, after {raw['after']:,.0f}); {os.cpu_count()} cores in all\n")
    print("| hosts | broadcast | actors | env steps/s | per host | staleness mean | staleness max | s per update | "
          "ratio to raw | machine CPU busy | other work (cores) |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in table:
        print(f"| {row['hosts']} | {row['broadcast']} | {row['actors']} | {row['env steps/s']:,.0f} | "
              f"{row['per host']:,.0f} | {row['staleness mean']:.2f} | {row['staleness max']:.0f} | "
              f"{row['s per update']:.3f} | {row['ratio to raw']:.2f} | {row['machine CPU busy']:.0%} | "
              f"{row['other work (cores)']:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[1, 2, 4], help="host counts to sweep")
    parser.add_argument("--broadcast", nargs="+", choices=["flat", "tree"], default=["flat", "tree"])
    parser.add_argument("--rate", default="1gbit", help="every host's link, each direction (tc tbf rate)")
    parser.add_argument("--seconds", type=float, default=40.0, help="wall seconds of each training run")
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
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--links-inside", help=argparse.SUPPRESS)
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
            with netem.emulated_hosts(hosts, args.rate) as addresses:
                if not args.no_links:
                    links.append({"hosts": hosts, "by_receivers_per_host": measure_links(args, hosts)})
                    print(f"{hosts} host(s), links: " + ", ".join(
                        f"{r['receivers']} receivers flat {r['flat_median_ms']:.1f} ms, tree "
                        f"{r['tree_median_ms']:.1f} ms" for r in links[-1]["by_receivers_per_host"]), flush=True)
                cluster = RayCluster(addresses, args.actors_per_host, ray_env())
                try:
                    cluster.start()
                    for broadcast in args.broadcast:
                        points.append({"hosts": hosts, "broadcast": broadcast, "actors": hosts * args.actors_per_host,
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
    table = [{"hosts": p["hosts"], "broadcast": p["broadcast"], "actors": p["actors"],
              "env steps/s": p["steps_per_second"], "per host": p["steps_per_second"] / p["hosts"],
              "staleness mean": p["staleness_mean"], "staleness max": p["staleness_max"],
              "s per update": p["update_interval_s"], "raw bound": raw["steps_per_second"],
              "ratio to raw": p["steps_per_second"] / raw["steps_per_second"],
              "machine CPU busy": p["machine_cpu_busy"], "other work (cores)": p["other_cores"]} for p in points]
    print_table(table, raw, args)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    # "table" first: the pages' generic renderer shows the first of the longest lists of records.
    args.output.write_text(json.dumps({
        "table": table, **git_commit(), "date": started, "machine": platform.node(), "cores": os.cpu_count(),
        "python": platform.python_version(), "torch": torch.__version__, "ray": ray_version(),
        "load_average": load_before, "load_average_after": load_after, "rate": args.rate, "seconds": args.seconds,
        "env": args.env, "num_envs": args.num_envs, "batch_size": args.batch_size,
        "actors_per_host": args.actors_per_host, "security": args.security, "quiet_cores": args.quiet_cores,
        "retries": args.retries, "model": [256, 128],
        "weight_bytes": weight_bytes(args), "raw": raw, "points": points,
        "links": {"megabytes": args.megabytes, "reps": args.reps, "rate": args.rate, "security": args.security,
                  "hosts": links},
    }, indent=2) + "\n")
    print(f"\nload average before {', '.join(f'{v:.2f}' for v in load_before)}, "
          f"after {', '.join(f'{v:.2f}' for v in load_after)}\nwritten: {args.output}")
    missing = [f"{p['hosts']} hosts {p['broadcast']}: {p['actors_connected_per_host']}" for p in points
               if not p["all_hosts_contributed"]]
    if missing:
        raise SystemExit("not every host contributed: " + "; ".join(missing))


if __name__ == "__main__":
    main()
