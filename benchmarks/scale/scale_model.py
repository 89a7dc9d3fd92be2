"""A model of sampling throughput, staleness, broadcast latency and the learner's connections and
memory, flat against tree, from 10 to 6000 cores: measured points in, a table out.

It is calibrated on what `sampling_hosts.py` measured on 1, 2 and 4 emulated hosts (network
namespaces with shaped links, each host a CPU quota of its own, the learner one too; the runtime's
own learner, actors, relays, credits), checked against the 8- and 16-host points it never saw
(each within 20%, or the check says which is not and by how much), and, where `fan_in.py`'s
results exist, given the learner's cost per connection from them. The table is for clusters of
40 cores per node, one actor per core. Nothing at 6000 cores is measured: it is this model.

Broadcast latency of one weight version (B bytes) to every actor, n nodes of p actors, from the
link measurement of `sampling_hosts.py` (a 4 MB blob, the runtime's publisher, relays, subscribers):
  a fixed cost `a` and a local copy `c_local` per subscriber on a host (1-host points), a link copy
  `c` (flat 2- and 4-host points, (n-1)*p copies through the learner's link) and a relay hop `h`
  (mean residual of the tree 2- and 4-host points, 0 at least);
  flat: T = a + max(c * (n-1) * p, c_local * p)
  tree: T = a + c * (r + k) + h * hops + c_local * p, r relays fed by the learner, k the most leaves
        one relay feeds (fan-out ceil(sqrt(n)), `comm.topology`); c and c_local scale with B.

Throughput: X(n) = min(n * x, L). x is a host's sampling rate (least squares through the origin
over the 1-4 host points of each layout). L is the learner's ceiling: its CPU per second grows
as f + v * X (fitted on the same points from the learner's measured cores), so L = (cores - f) / v
on the learner's cores. At scale a message carries what the runtime sends
(`runtime.run_shape.steps_per_message`): an actor's share of a batch, raised to about 20 ms of
sampling for an environment whose step is fast (`--env-step-us`: CartPole's 10 us make every
message a 256-frame rollout; 0 sizes them as shares, as the calibration points ran), and
`fan_in.py`'s learner CPU per message at that many connections (direct for flat, relayed for
tree) is added per frame; the credits (`batches_in_flight` batches of messages) cap the actors
sampling at once.

Staleness, now bounded by credits: an actor samples one message (m frames, as above) on the
weights it holds, so a sample is older the longer the messages in flight take against the seconds
per update U = batch / X: s = alpha + k * F + T / U,
F = min(m * N / batch, batches_in_flight) the batches the N actors sample at once, which the
credits cap (with more actors than credits, actors wait in turn), and T / U = X * T / batch the
versions the weights spend on the way. alpha and k are fitted on the 1-4 host points (both
layouts). F = m N / batch grows with the actors until the messages in flight fill the credits'
batch (16 actors with 256-frame messages and batches of 4096) and stays at 1 from there, so the
queueing part stays flat whatever the actor count. What the credits do not bound is a broadcast
slower than an update, which `runtime.max_policy_lag` then drops.

Learner ranks (`--learner-table-cores`, 6000): CartPole, Football and image Pong (DQN's CNN) with
1-64 data-parallel ranks of CPU cores (`learner_ceiling.json`, one thread), GPUs (one H200 measured)
and GPUs projected (targets). An update of the global batch B costs each of N ranks B/N frames of
compute, the host's cost per frame (fan_in.py's CPU per message over the frames of a message and the
rollouts a relay message carries, plus `--receive-ns-per-byte` beyond fan_in.py's frame) and one
allreduce per minibatch step of the config (`allreduce.py`'s ring fit, one rank a host behind
`--network-gbit`), in series; the batch is the config's, or one message from every actor when larger
(each workload's message timed from its environment's step, `ScaleWorkload.env_step_seconds`).
It also searches, per workload, kind of rank and case (a batch of one message or one whole rollout
per actor; 1 or `--relay-batch-rollouts` rollouts a message), the fewest ranks (to `--max-learners`)
within 90% of linear sampling. Written under `learners`, drawn in scale_model_learners.png.

Connections and memory at the learner: flat one experience connection per actor, tree one per
first-layer relay plus the learner's node's own actors (`runtime.placement.relay_tree`); memory and
descriptors a line over connections from `fan_in.py`'s rows (100 to 6000 connections).

    python benchmarks/scale/scale_model.py [--cores-per-node 40] [--learner-cores 1] [--batch-size N]
                                     [--sampling-hosts PATH] [--fan-in PATH] [--broadcast PATH]
                                     [--staleness PATH] [--output PATH]

Reads benchmarks/results/sampling_hosts.json, fan_in.json and broadcast.json (`broadcast.py
--emulate-links` points are further latency checks), or the files named; `--staleness` is
accepted for `benchmarks/reproduce.py` and not used (staleness.py's runs predate flow control).
Prints the calibration, the check and the table; writes benchmarks/results/scale_model.json (or
`--output`) and, when matplotlib is installed, docs/benchmarks/figures/scale_model.png (named after
`--output`'s stem).
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import common
from lamarckian_hpc.comm.topology import build_tree
from lamarckian_hpc.runtime.run_shape import steps_per_message

RESULTS = Path(__file__).resolve().parents[1] / "results"
CORES = [10, 20, 40, 80, 160, 320, 640, 1000, 1500, 2000, 3000, 4000, 5000, 6000]
TOLERANCE = 0.20
FIT_HOSTS = (1, 2, 4)
LAYOUTS = ("flat", "tree")
BUSY_LEARNER_CORES = 0.1
ROLLOUT_STEPS = 32  # runtime.rollout_steps of the sampling_hosts runs (the default)


# ---------------------------------------------------------------- broadcast latency
def tree_shape(nodes: int) -> tuple[int, int]:
    """(relays fed by the learner, most leaves fed by one relay) of the tree over `nodes`."""
    tree = build_tree([str(i) for i in range(nodes)])
    relays = len(tree.children_of(tree.root))
    leaves = max((len(tree.children_of(r)) for r in tree.children_of(tree.root)), default=0)
    return relays, leaves


def hops(nodes: int) -> int:
    relays, leaves = tree_shape(nodes)
    return (relays > 0) + (leaves > 0)


def flat_latency(p: dict[str, float], nodes: int, per_node: int) -> float:
    return p["a"] + max(p["c"] * (nodes - 1) * per_node, p["c_local"] * per_node)


def tree_latency(p: dict[str, float], nodes: int, per_node: int) -> float:
    relays, leaves = tree_shape(nodes)
    return p["a"] + p["c"] * (relays + leaves) + p["h"] * hops(nodes) + p["c_local"] * per_node


MODELS: dict[str, Callable[[dict[str, float], int, int], float]] = {"flat": flat_latency, "tree": tree_latency}


def _line(x: list[float], y: list[float]) -> tuple[float, float]:
    """Least-squares intercept and slope."""
    if len(set(x)) < 2:  # one abscissa: no slope to fit
        return float(np.mean(y)), 0.0
    slope, intercept = np.polyfit(np.asarray(x, float), np.asarray(y, float), 1)
    return float(intercept), float(slope)


def link_rows(hosts_run: dict[str, Any]) -> list[dict[str, Any]]:
    """sampling_hosts.py's link measurement, one row per (hosts, receivers per host)."""
    return [{"hosts": block["hosts"], "per_node": row["receivers_per_host"], "receivers": row["receivers"],
             "flat_s": row["flat_median_ms"] / 1e3, "tree_s": row["tree_median_ms"] / 1e3}
            for block in hosts_run["links"]["hosts"] for row in block["by_receivers_per_host"]]


def calibrate(rows: list[dict[str, Any]]) -> dict[str, float]:
    one = [r for r in rows if r["hosts"] == 1]
    more = [r for r in rows if 1 < r["hosts"] and r["hosts"] in FIT_HOSTS]
    if len({r["per_node"] for r in one}) < 2 or not more:
        raise SystemExit("the calibration needs sampling_hosts.py's link points on 1 host (two receiver counts "
                         "or more) and on 2 hosts: --hosts 1 2 ... --link-receivers 1 2 ...")
    a, c_local = _line([r["per_node"] for r in one] * 2, [r["flat_s"] for r in one] + [r["tree_s"] for r in one])
    x = np.asarray([(r["hosts"] - 1) * r["per_node"] for r in more], float)  # copies over the learner's link
    c = float(np.dot(x, np.asarray([r["flat_s"] for r in more]) - a) / np.dot(x, x))
    params = {"a": a, "c": c, "c_local": c_local, "h": 0.0}
    # A relay cannot make a version arrive sooner: a negative mean residual is noise, held at 0.
    params["h"] = max(0.0, statistics.fmean(r["tree_s"] - tree_latency(params, r["hosts"], r["per_node"]) for r in more))
    return params


def latency_points(params: dict[str, float], rows: list[dict[str, Any]], broadcast: dict[str, Any] | None) -> list:
    points = []
    for row in rows:
        for mode, model in MODELS.items():
            points.append({"what": f"{mode} latency ms, {row['hosts']} hosts x {row['per_node']} (sampling_hosts)",
                           "receivers": row["receivers"], "measured": row[f"{mode}_s"] * 1e3,
                           "predicted": model(params, row["hosts"], row["per_node"]) * 1e3,
                           "role": "fit" if row["hosts"] in FIT_HOSTS else "check"})
    emulated = (broadcast or {}).get("emulated")
    for row in emulated["rows"] if emulated else []:
        for mode, model in MODELS.items():
            points.append({"what": f"{mode} latency ms, {row['nodes']} hosts x {emulated['per_node']} (broadcast.py)",
                           "receivers": row["receivers"], "measured": row[f"{mode}_median_ms"],
                           "predicted": model(params, row["nodes"], emulated["per_node"]) * 1e3, "role": "check"})
    return points


def scaled(params: dict[str, float], weight_bytes: int, blob_bytes: int) -> dict[str, float]:
    """The latency parameters for weights of another size: the per-byte costs scale, a and h do not."""
    ratio = weight_bytes / blob_bytes
    return {**params, "c": params["c"] * ratio, "c_local": params["c_local"] * ratio}


# ---------------------------------------------------------------- throughput and staleness across hosts
def fit_sampling(hosts_run: dict[str, Any], weights: dict[str, float]) -> dict[str, Any]:
    """Per-host rate per layout, the learner's cost line and the staleness parameters, on the
    1-4 host points that have figures."""
    points = [p for p in hosts_run["points"] if "failed" not in p]
    fit = [p for p in points if p["hosts"] in FIT_HOSTS]
    per_host = hosts_run["actors_per_host"]
    rate = {}
    for layout in LAYOUTS:
        mine = [p for p in fit if p["broadcast"] == layout] or fit
        rate[layout] = sum(p["hosts"] * p["steps_per_second"] for p in mine) / sum(p["hosts"] ** 2 for p in mine)
    costed = [p for p in fit if p.get("learner_cores") is not None]
    fixed, per_frame = _line([p["steps_per_second"] for p in costed], [p["learner_cores"] for p in costed]) \
        if costed else (0.0, 0.0)
    batch = hosts_run["batch_size"]
    broadcast_part = [p["steps_per_second"] * MODELS[p["broadcast"]](weights, p["hosts"], per_host) / batch
                      for p in fit]
    # s - X T / batch = alpha + k * min(m N / batch, batches in flight), m the frames per message
    ratios = [in_flight(batch, p["actors"], hosts_run["num_envs"], ROLLOUT_STEPS, 1.0) for p in fit]
    alpha, slope = _line(ratios, [p["staleness_mean"] - part for p, part in zip(fit, broadcast_part)])
    learner_cpus = hosts_run.get("learner_cpus") or 1.0
    return {"host_rate": rate, "learner_fixed_cores": fixed, "learner_cores_per_frame": max(per_frame, 1e-12),
            "learner_cpus": learner_cpus, "learner_ceiling": (learner_cpus - fixed) / max(per_frame, 1e-12),
            "alpha": alpha, "versions_per_batch_in_flight": slope, "batch_size": batch, "num_envs": hosts_run["num_envs"],
            "batches_in_flight": 1.0, "host_cpus": hosts_run.get("host_cpus"), "actors_per_host": per_host}


def in_flight(batch: int, actors: int, num_envs: int, rollout_steps: int, batches: float) -> float:
    """Batches of experience the actors sample at once: a message each (m frames), at most the
    credits' `batches`: min(m N / batch, batches)."""
    return min(message_frames(batch, actors, num_envs, rollout_steps) * actors / batch, batches)


def staleness(fit: dict[str, Any], steps: float, latency: float, batch: int, ratio: float) -> float:
    """alpha + k * (batches in flight) + T / U, U = batch / X the seconds per update."""
    return fit["alpha"] + fit["versions_per_batch_in_flight"] * ratio + steps * latency / batch


def sampling_points(fit: dict[str, Any], hosts_run: dict[str, Any], weights: dict[str, float]) -> list:
    points = []
    for p in (p for p in hosts_run["points"] if "failed" not in p):
        layout, hosts = p["broadcast"], p["hosts"]
        steps = min(hosts * fit["host_rate"][layout], fit["learner_ceiling"])
        role = "fit" if hosts in FIT_HOSTS else "check"
        latency = MODELS[layout](weights, hosts, fit["actors_per_host"])
        points += [{"what": f"{layout} throughput steps/s, {hosts} hosts (sampling_hosts)", "receivers": p["actors"],
                    "measured": p["steps_per_second"], "predicted": steps, "role": role},
                   {"what": f"{layout} staleness, {hosts} hosts (sampling_hosts)", "receivers": p["actors"],
                    "measured": p["staleness_mean"], "role": role,
                    "predicted": staleness(fit, p["steps_per_second"], latency, fit["batch_size"], in_flight(
                        fit["batch_size"], p["actors"], fit["num_envs"], ROLLOUT_STEPS, fit["batches_in_flight"]))}]
    return points


def judge(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for index, point in enumerate(points):
        error = point["predicted"] / point["measured"] - 1 if point["measured"] else float("nan")
        role = point.pop("role")  # last, after the figures, in the page's table
        points[index] = {**point, "error": error, "within": abs(error) <= TOLERANCE, "role": role}
    return points


# ---------------------------------------------------------------- the learner's fan-in
def fan_in_costs(fan_in: dict[str, Any] | None) -> dict[str, Any] | None:
    """From fan_in.py's rows: learner CPU seconds per message against connections, per mode, and
    memory (MiB) and descriptors as lines over connections (both modes together)."""
    rows = [r for r in (fan_in or {}).get("results", []) if r.get("mode") in ("direct", "relayed")]
    if not rows:
        return None
    # Per message only where the learner was busy: at a few messages a second its CPU is its fixed cost.
    per_message = {mode: sorted((r["actors"], r["learner_cpu"] / r["messages_per_s"]) for r in rows
                                if r["mode"] == mode and r["learner_cpu"] >= BUSY_LEARNER_CORES)
                   for mode in ("direct", "relayed")}
    connections = [r["connections_held"] or r["actors"] for r in rows]
    return {"per_message": per_message,
            "rss_mib": _line(connections, [r["learner_rss_mib"] for r in rows]),
            "fds": _line(connections, [r["learner_fds"] for r in rows]),
            "source": {"time": fan_in.get("time"), "rows": len(rows)}}


def message_cost(fan: dict[str, Any] | None, mode: str, actors: int) -> float:
    """Learner CPU seconds per message with `actors` behind it (direct: each a connection; relayed:
    through relays), linear in log(actors) between the measured counts and held at the ends; 0
    without fan_in.py's results."""
    table = (fan or {}).get("per_message", {}).get(mode) or []
    if not table:
        return 0.0
    x = [math.log(max(count, 1)) for count, _ in table]
    return float(np.interp(math.log(max(actors, 1)), x, [cost for _, cost in table]))


def message_frames(batch: int, actors: int, num_envs: int, rollout_steps: int,
                   step_seconds: float | None = None) -> int:
    """The runtime's message (`runtime.run_shape.steps_per_message`): an actor's share of a batch, or
    where the environment's step is known (`step_seconds`), about 20 ms of sampling where that is
    more, at most a rollout. The calibration points ran before runs timed their environment, so
    they are sized without it."""
    return steps_per_message(batch, actors, num_envs, rollout_steps, step_seconds)


# ---------------------------------------------------------------- the table
def predict(fit: dict[str, Any], latency: dict[str, float], fan: dict[str, Any] | None,
            args: argparse.Namespace) -> list[dict[str, Any]]:
    per_core = args.steps_per_core or max(fit["host_rate"].values()) / ((fit["host_cpus"] or 1.0)
                                                                        / fit["actors_per_host"])
    batch, rows = args.batch_size or fit["batch_size"], []
    for cores in CORES:
        nodes, per_node = math.ceil(cores / args.cores_per_node), min(cores, args.cores_per_node)
        frames = message_frames(batch, cores, args.num_envs, args.rollout_steps, args.env_step_us * 1e-6 or None)
        budget = max(1, math.ceil(fit["batches_in_flight"] * batch / frames))  # messages in flight at once
        row: dict[str, Any] = {"cores": cores, "nodes": nodes, "fanout": build_tree([str(i) for i in range(nodes)]).fanout,
                               "message_frames": frames, "credits": budget}
        relays = tree_shape(nodes)[0]
        for layout, mode in (("flat", "direct"), ("tree", "relayed")):
            connections = cores if layout == "flat" or nodes == 1 else per_node + relays
            seconds_per_frame = fit["learner_cores_per_frame"] + message_cost(fan, mode if nodes > 1 else "direct",
                                                                              cores) / frames
            ceiling = (args.learner_cores - fit["learner_fixed_cores"]) / seconds_per_frame
            actors = min(cores, budget) * per_core  # with fewer credits than actors, actors wait in turn
            steps = min(actors, ceiling)
            delay = MODELS[layout](latency, nodes, per_node)
            ratio = min(frames * min(cores, budget) / batch, fit["batches_in_flight"])
            row.update({f"{layout}_steps_per_s": steps, f"{layout}_learner_bound": bool(ceiling < actors),
                        f"{layout}_ms": delay * 1e3, f"{layout}_staleness": staleness(fit, steps, delay, batch, ratio),
                        f"{layout}_connections": connections})
            row[f"{layout}_over_max_lag"] = bool(row[f"{layout}_staleness"] > args.max_policy_lag)
            if fan:
                row[f"{layout}_learner_mib"] = fan["rss_mib"][0] + fan["rss_mib"][1] * connections
                row[f"{layout}_learner_fds"] = fan["fds"][0] + fan["fds"][1] * connections
        row["actor_capacity_steps_per_s"] = cores * per_core
        rows.append(row)
    return rows


# ---------------------------------------------------------------- learner ranks
@dataclass(frozen=True)
class ScaleWorkload:
    """A workload of the learner table: its learner (a `learner_ceiling.py` workload, which names its
    config), an actor core's env steps/s (None: the sampling fit's CartPole rate) and the GPU
    learner's env steps/s today and projected."""

    ceiling: str
    steps_per_core: float | None
    sampling_source: str
    gpu_today: float
    gpu_projected: float
    #: Seconds of one step of the environment alone, which sizes the run's messages
    #: (`runtime.run_shape.env_step_seconds`), and where the figure comes from.
    env_step_seconds: float
    step_source: str


#: GPU figures: `learner_ceiling.py --device cuda` on one H200 (serial mode, each config's own
#: minibatches); the projections are targets, not measurements: the image learner's 150,000 env
#: steps/s after the GPU work, and for the MLPs the CPU's 16 threads of the same machine (7,642 and
#: 36,244), the least the GPU learner is to reach.
SCALE_WORKLOADS = {
    "cartpole": ScaleWorkload("cartpole", None, "the sampling fit: a 0.05-core host's rate x 20", 5_890, 7_642,
                              10e-6, "env_step_seconds of configs/ppo_cartpole.yaml here: 9-11 us"),
    "football": ScaleWorkload("football", 350.0, "gfootball's engine, about 350 steps/s per core (Learning page)",
                              26_707, 36_244, 1 / 350, "the engine, about 350 steps a second on one core (Learning page)"),
    "image pong": ScaleWorkload("pong-nature", 750.0, "an actor of ppo_pong_image.yaml, about 750 steps/s per core "
                                "(Environments guide)", 37_217, 150_000,
                                376e-6, "env_step_seconds of lamarckian/PongImage-v0 here: 376-401 us"),
}
LEARNER_COUNTS = (1, 2, 4, 8, 16, 32, 64)
RANK_KINDS = ("cpu", "gpu_today", "gpu_projected")
FRAME_EXTRA_BYTES = 24  # an env frame's action, log-probability, reward and policy version on the wire
NEAR_LINEAR = 0.9


def scenarios(args: argparse.Namespace) -> list[tuple[str, int]]:
    """(batch policy, rollouts per message at the learner) of the near-linear search: today's relays
    and aggregating ones, each with one message and one whole rollout per actor per update."""
    return [(policy, rollouts) for policy in ("message", "rollout")
            for rollouts in sorted({1, args.relay_batch_rollouts})]


def learner_inputs(args: argparse.Namespace, fit: dict[str, Any], fan: dict[str, Any] | None) -> dict[str, Any]:
    """Per workload, what the learner table is computed from: its config's batch, epochs and
    minibatches, its gradient's floats, its bytes per frame, the learner's env steps/s per CPU core
    (`learner_ceiling.json`, one thread) and per GPU, and an actor core's env steps/s."""
    from benchmarks.scale import allreduce
    from benchmarks.scale.learner_ceiling import WORKLOADS, workload_config

    ceiling = _load(args.learner_ceiling) or {"rows": []}
    reduce_run = _load(args.allreduce)
    floats = (reduce_run or {}).get("gradient_floats") or allreduce.gradient_sizes()
    per_core_cartpole = max(fit["host_rate"].values()) / ((fit["host_cpus"] or 1.0) / fit["actors_per_host"])
    calibration = (fan or {}).get("calibration") or {}
    calibration_bytes = calibration.get("message_bytes", 0) / max(calibration.get("message_steps", 1), 1)
    inputs = {}
    for name, spec in SCALE_WORKLOADS.items():
        workload = WORKLOADS[spec.ceiling]
        algorithm = workload_config(workload, "ppo", 1, "cpu").algorithm
        rows = [r for r in ceiling["rows"] if r["workload"] == spec.ceiling and r["algorithm"] == "ppo"
                and r.get("cnn_precision") in (None, "float32")]
        cpu = [r for r in rows if r["device"] == "cpu" and r["threads"] == 1]
        cpu = [r for r in cpu if r["label"] == args.ceiling_label] or cpu
        if not cpu:
            raise SystemExit(f"no one-thread PPO row for {spec.ceiling} in {args.learner_ceiling}: run "
                             f"benchmarks/scale/learner_ceiling.py --workloads {spec.ceiling} --threads 1")
        minibatch = algorithm.batch_size // algorithm.num_minibatches  # a GPU row at the config's own minibatches
        cuda = [r for r in rows if r["device"] == "cuda" and r["batch"] // r["minibatches"] == minibatch]
        space = workload.observation_space
        frame_bytes = int(np.prod(space.shape)) * space.dtype.itemsize + FRAME_EXTRA_BYTES
        inputs[name] = {
            "config": workload.config, "learner": spec.ceiling, "batch": algorithm.batch_size,
            "minibatch_steps": algorithm.num_epochs * algorithm.num_minibatches,
            "gradient_floats": floats[spec.ceiling],
            "frame_bytes": frame_bytes, "bytes_beyond_calibration": max(0.0, frame_bytes - calibration_bytes),
            "cpu_steps_per_s": cpu[-1]["steps_per_second"], "cpu_source": f"learner_ceiling.json ({cpu[-1]['label']})",
            "gpu_today_steps_per_s": max(r["steps_per_second"] for r in cuda) if cuda else spec.gpu_today,
            "gpu_today_source": "learner_ceiling.json (cuda)" if cuda else "learner_ceiling.py --device cuda, one H200",
            "gpu_projected_steps_per_s": spec.gpu_projected, "gpu_projected_source": "projection (a target)",
            "steps_per_core": spec.steps_per_core or per_core_cartpole, "sampling_source": spec.sampling_source,
            "env_step_seconds": spec.env_step_seconds, "step_source": spec.step_source,
        }
    fit_ring = (reduce_run or {}).get("fit") or allreduce.fit_ring()
    latency = fit_ring["latency_s"] if args.ring_latency_us is None else args.ring_latency_us * 1e-6
    return {"workloads": inputs, "ring": {"bytes_per_s": fit_ring["bytes_per_s"], "latency_s": latency},
            "network_gbit": args.network_gbit, "network_latency_s": args.network_latency_us * 1e-6,
            "receive_s_per_byte": args.receive_ns_per_byte * 1e-9, "near_linear": NEAR_LINEAR}


def scale_batch(work: dict[str, Any], cores: int, args: argparse.Namespace, policy: str = "message") -> int:
    """The global batch at `cores` actors: `--learner-batch`, else the config's or, when larger, one
    message from every actor (`message`: the smallest batch whose credits let every actor sample at
    once; a message of about 20 ms of sampling, a tick of `--num-envs` frames at least) or one whole
    rollout of `--rollout-steps` x `--num-envs` frames from every actor (`rollout`)."""
    if args.learner_batch and policy == "message":
        return args.learner_batch
    if policy == "rollout":
        frames = args.num_envs * args.rollout_steps
    else:  # a batch of one tick from every actor, then each message as the runtime times it
        frames = message_frames(cores * args.num_envs, cores, args.num_envs, args.rollout_steps, work["env_step_seconds"])
    return max(work["batch"], cores * frames)


def learner_point(inputs: dict[str, Any], name: str, kind: str, learners: int, cores: int, fit: dict[str, Any],
                  fan: dict[str, Any] | None, args: argparse.Namespace, rollouts_per_message: int,
                  batch_policy: str = "message") -> dict[str, Any]:
    """Env steps/s of `cores` actors and `learners` data-parallel ranks of `kind` on one workload.

    An update of the global batch B costs each rank B/N frames of compute (1 / its ceiling each),
    the learner's host cost per frame (the per-message CPU over the frames of a message, divided by
    the rollouts a relay batch carries, and the bytes of a frame beyond fan_in.py's message), in
    series, and one allreduce of the gradient per minibatch step (the ring model across hosts, one
    rank a host). The learners train L = B / that; the actors sample as in the model above (the
    credits cap the actors sampling at once); each rank's frames come in over its own host's link.
    """
    from benchmarks.scale import allreduce

    work = inputs["workloads"][name]
    batch = scale_batch(work, cores, args, batch_policy)
    frames = message_frames(batch, cores, args.num_envs, args.rollout_steps, work["env_step_seconds"])
    budget = max(1, math.ceil(fit["batches_in_flight"] * batch / frames))
    per_frame = {"compute": 1 / work[f"{kind}_steps_per_s"],
                 "messages": message_cost(fan, "relayed" if cores > args.cores_per_node else "direct",
                                          math.ceil(cores / learners)) / (frames * rollouts_per_message),
                 "bytes": work["bytes_beyond_calibration"] * inputs["receive_s_per_byte"]}
    reduce_s = work["minibatch_steps"] * allreduce.ring_seconds(inputs["ring"], work["gradient_floats"], learners,
                                                                inputs["network_gbit"], inputs["network_latency_s"])
    parts = {key: batch / learners * value for key, value in per_frame.items()} | {"allreduce": reduce_s}
    update_s = sum(parts.values())
    linear = cores * work["steps_per_core"]
    caps = {"actors": min(cores, budget) * work["steps_per_core"], "learners": batch / update_s,
            "network": learners * inputs["network_gbit"] * 1e9 / 8 / work["frame_bytes"]}
    bound = min(caps, key=caps.get)
    steps = caps[bound]
    if bound == "learners":
        bound = f"learners: {max(parts, key=parts.get)}"
    return {"workload": name, "ranks": kind, "learners": learners, "cores": cores, "batch": batch,
            "minibatch_steps": work["minibatch_steps"], "message_frames": frames,
            "rollouts_per_message": rollouts_per_message, "steps_per_s": steps, "linear_steps_per_s": linear,
            "efficiency": steps / linear, "bound": bound, "update_s": update_s,
            **{f"{key}_s": value for key, value in parts.items()}}


def learner_table(inputs: dict[str, Any], fit: dict[str, Any], fan: dict[str, Any] | None,
                  args: argparse.Namespace) -> dict[str, Any]:
    """The table at `--learner-cores-at` actor cores for 1-64 ranks of each kind, and per workload,
    kind and relay batch the fewest ranks that keep throughput within 90% of linear sampling."""
    rows = [learner_point(inputs, name, kind, count, args.learner_table_cores, fit, fan, args, 1)
            for name in SCALE_WORKLOADS for kind in RANK_KINDS for count in LEARNER_COUNTS]
    needed = []
    for name in SCALE_WORKLOADS:
        for kind in RANK_KINDS:
            for policy, rollouts in scenarios(args):
                curve = [learner_point(inputs, name, kind, count, args.learner_table_cores, fit, fan, args, rollouts,
                                       policy) for count in range(1, args.max_learners + 1)]
                enough = next((p for p in curve if p["efficiency"] >= NEAR_LINEAR), None)
                best = max(curve, key=lambda p: p["steps_per_s"])
                chosen = enough or best
                needed.append({"workload": name, "ranks": kind, "batch_policy": policy, "batch": chosen["batch"],
                               "rollouts_per_message": rollouts,
                               "learners_needed": enough["learners"] if enough else None,
                               "best_learners": best["learners"], "best_steps_per_s": best["steps_per_s"],
                               "best_efficiency": best["efficiency"], "bound_there": chosen["bound"],
                               "linear_steps_per_s": best["linear_steps_per_s"]})
    return {"cores": args.learner_table_cores, "rows": rows, "needed": needed, "inputs": inputs}


def learner_figure(table: dict[str, Any], inputs: dict[str, Any], fit: dict[str, Any], fan: dict[str, Any] | None,
                   args: argparse.Namespace, path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no figure"
    counts = sorted({round(v) for v in np.geomspace(1, args.max_learners, 40)})
    fig, axes = plt.subplots(1, len(SCALE_WORKLOADS), figsize=(16, 4.2))
    styles = {"cpu": ("C0", "CPU ranks (measured)"), "gpu_today": ("C1", "GPU ranks (measured)"),
              "gpu_projected": ("C2", "GPU ranks (projected)")}
    for axis, name in zip(axes, SCALE_WORKLOADS):
        for kind, (color, label) in styles.items():
            for rollouts, line in ((1, "-"), (args.relay_batch_rollouts, "--")):
                curve = [learner_point(inputs, name, kind, n, table["cores"], fit, fan, args, rollouts)
                         for n in counts]
                axis.loglog(counts, [p["steps_per_s"] for p in curve], line, color=color,
                            label=f"{label}, {rollouts} rollout{'s' if rollouts > 1 else ''}/message")
        linear = inputs["workloads"][name]["steps_per_core"] * table["cores"]
        axis.axhline(linear, color="0.4", ls=":", label="linear sampling")
        axis.axhline(NEAR_LINEAR * linear, color="0.7", ls=":", label=f"{NEAR_LINEAR:.0%} of linear")
        batch = scale_batch(inputs["workloads"][name], table["cores"], args)
        axis.set(xlabel="learner ranks", ylabel="env steps/s (model)",
                 title=f"{name}, {table['cores']:,} actor cores, batch {batch:,}")
    axes[0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"wrote {path}"


def _print_learners(table: dict[str, Any]) -> None:
    inputs = table["inputs"]
    print(f"\nlearner ranks at {table['cores']:,} cores: ring {inputs['ring']['bytes_per_s'] / 1e9:.2f} GB/s and "
          f"{inputs['ring']['latency_s'] * 1e6:.0f} us a step + {inputs['network_gbit']:g} Gbit/s and "
          f"{inputs['network_latency_s'] * 1e6:.0f} us across hosts")
    for name, work in inputs["workloads"].items():
        print(f"  {name}: batch {work['batch']:,}, {work['minibatch_steps']} minibatch steps, "
              f"{work['gradient_floats']:,} floats, {work['frame_bytes']:,} B a frame; "
              f"learner {work['cpu_steps_per_s']:,.0f}"
              f" per CPU core, {work['gpu_today_steps_per_s']:,.0f} per GPU ({work['gpu_projected_steps_per_s']:,.0f} "
              f"projected); actors {work['steps_per_core']:,.0f} per core")
    print("\n| workload | ranks | learners | env steps/s | of linear | bound |\n|---|---|---:|---:|---:|---|")
    for r in table["rows"]:
        print(f"| {r['workload']} | {r['ranks']} | {r['learners']} | {r['steps_per_s']:,.0f} | "
              f"{r['efficiency']:.1%} | {r['bound']} |")
    print("\n| workload | ranks | batch | rollouts/message | learners for 90% | best | at | bound |\n"
          "|---|---|---:|---:|---:|---:|---:|---|")
    for r in table["needed"]:
        print(f"| {r['workload']} | {r['ranks']} | {r['batch']:,} | {r['rollouts_per_message']} | "
              f"{r['learners_needed'] or 'none'} | "
              f"{r['best_efficiency']:.1%} | {r['best_learners']} | {r['bound_there']} |")


def figure(rows: list[dict[str, Any]], points: list[dict[str, Any]], rate: str, path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no figure"
    fig, axes = plt.subplots(1, 4, figsize=(19, 4.2))
    cores = [r["cores"] for r in rows]
    for layout, style in (("flat", "o-"), ("tree", "s-")):
        axes[0].loglog(cores, [r[f"{layout}_steps_per_s"] for r in rows], style, label=layout)
        axes[1].loglog(cores, [r[f"{layout}_ms"] for r in rows], style, label=layout)
    axes[0].loglog(cores, [r["actor_capacity_steps_per_s"] for r in rows], ":", color="0.5", label="actors alone")
    axes[0].set(xlabel="cores (40 per node)", ylabel="env steps/s (model)", title="throughput, 1 learner")
    axes[1].set(xlabel="cores (40 per node)", ylabel="broadcast latency, ms (model)", title=f"{rate} links")
    for axis in axes[:2]:
        axis.legend(fontsize=7)
    for axis, kind in ((axes[2], "throughput"), (axes[3], "staleness")):
        chosen = [p for p in points if f" {kind}" in p["what"]]
        if not chosen:
            continue
        high = max(max(p["measured"], p["predicted"]) for p in chosen) * 1.2
        line = np.linspace(0.0, high, 50)
        axis.fill_between(line, line * (1 - TOLERANCE), line * (1 + TOLERANCE), color="0.9", label="within 20%")
        axis.plot(line, line, color="0.6", lw=1)
        for layout, color in (("flat", "C0"), ("tree", "C1")):
            for role, marker in (("fit", "o"), ("check", "s")):
                mine = [p for p in chosen if p["what"].startswith(layout) and p["role"] == role]
                if mine:
                    axis.plot([p["measured"] for p in mine], [p["predicted"] for p in mine], marker, color=color,
                              mfc=color if role == "check" else "none", label=f"{layout}, {role}")
        axis.set(xlabel="measured", ylabel="model", title=f"{kind} across hosts: model vs measured")
        axis.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"wrote {path}"


def _load(path: Path) -> dict[str, Any] | None:
    return common.read_results(path) if path.exists() else None


def _print(params: dict[str, float], fit: dict[str, Any], points: list, prediction: list, fan: Any) -> None:
    print("calibration: " + ", ".join(f"{k} = {v * 1e3:.2f} ms" for k, v in params.items()))
    print(f"per-host rate {', '.join(f'{k} {v:,.0f}' for k, v in fit['host_rate'].items())} steps/s; learner "
          f"{fit['learner_fixed_cores']:.3f} cores + {fit['learner_cores_per_frame'] * 1e6:.2f} us per frame, ceiling "
          f"{fit['learner_ceiling']:,.0f} steps/s on {fit['learner_cpus']} cores; staleness alpha "
          f"{fit['alpha']:.3f}, {fit['versions_per_batch_in_flight']:.3f} per batch in flight; fan-in "
          f"{'from fan_in.py' if fan else 'none'}")
    print("\n| measured point | receivers | measured | model | error | role |\n|---|---:|---:|---:|---:|---|")
    for p in points:
        print(f"| {p['what']} | {p['receivers']} | {p['measured']:,.2f} | {p['predicted']:,.2f} | "
              f"{100 * p['error']:+.0f}%{'' if p['within'] else ' (over 20%)'} | {p['role']} |")
    print("\n| cores | nodes | flat steps/s | tree steps/s | flat ms | tree ms | flat staleness | tree staleness | "
          "flat conns | tree conns |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in prediction:
        print(f"| {r['cores']} | {r['nodes']} | {r['flat_steps_per_s']:,.0f} | {r['tree_steps_per_s']:,.0f} | "
              f"{r['flat_ms']:,.0f} | {r['tree_ms']:,.0f} | {r['flat_staleness']:.2f} | {r['tree_staleness']:.2f} | "
              f"{r['flat_connections']} | {r['tree_connections']} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores-per-node", type=int, default=40)
    parser.add_argument("--learner-cores", type=float, default=1.0, help="the learner's cores at scale")
    parser.add_argument("--batch-size", type=int, default=None, help="frames per update at scale (default: measured)")
    parser.add_argument("--num-envs", type=int, default=8, help="envs per actor at scale")
    parser.add_argument("--steps-per-core", type=float, default=None,
                        help="an actor core's env steps/s at scale (default: the measured host rate per core)")
    parser.add_argument("--rollout-steps", type=int, default=32, help="runtime.rollout_steps at scale")
    parser.add_argument("--env-step-us", type=float, default=SCALE_WORKLOADS["cartpole"].env_step_seconds * 1e6,
                        help="microseconds of one CartPole step, which size the messages of the one-learner table "
                             "(runtime.run_shape.env_step_seconds; 0: an actor's share of a batch, as before runs "
                             "timed their environment)")
    parser.add_argument("--max-policy-lag", type=int, default=4,
                        help="runtime.max_policy_lag: a mean staleness above it means most samples are dropped")
    parser.add_argument("--sampling-hosts", type=Path, default=RESULTS / "sampling_hosts.json")
    parser.add_argument("--fan-in", type=Path, default=RESULTS / "fan_in.json")
    parser.add_argument("--broadcast", type=Path, default=RESULTS / "broadcast.json")
    parser.add_argument("--staleness", type=Path, default=None, help="accepted, not used (runs before credits)")
    parser.add_argument("--update-seconds", type=float, default=None, help=argparse.SUPPRESS)  # old option
    parser.add_argument("--learner-ceiling", type=Path, default=RESULTS / "learner_ceiling.json")
    parser.add_argument("--ceiling-label", default="after", help="learner_ceiling.json's rows of this label")
    parser.add_argument("--allreduce", type=Path, default=RESULTS / "allreduce.json")
    parser.add_argument("--network-gbit", type=float, default=10.0, help="each learner host's link (allreduce, ingress)")
    parser.add_argument("--network-latency-us", type=float, default=25.0, help="one-way latency between hosts")
    parser.add_argument("--receive-ns-per-byte", type=float, default=2.7,
                        help="the learner's CPU per byte received beyond fan_in.py's messages (CURVE: 2.7)")
    parser.add_argument("--relay-batch-rollouts", type=int, default=40,
                        help="rollouts an aggregating relay sends up as one message (today 1)")
    parser.add_argument("--ring-latency-us", type=float, default=None,
                        help="the allreduce's software latency per ring step (default: allreduce.json's fit)")
    parser.add_argument("--learner-table-cores", type=int, default=6000)
    parser.add_argument("--max-learners", type=int, default=4096, help="the most ranks searched for 90%% of linear")
    parser.add_argument("--learner-batch", type=int, default=None,
                        help="global batch of the learner table (default: the config's, or one message of "
                             "--num-envs frames per actor when larger)")
    parser.add_argument("--output", type=Path, default=RESULTS / "scale_model.json")
    common.add_common_args(parser)
    args = parser.parse_args()
    hosts_run = _load(args.sampling_hosts)
    if hosts_run is None or not hosts_run["links"]["hosts"]:
        raise SystemExit(f"no per-hop costs in {args.sampling_hosts}: run benchmarks/scale/sampling_hosts.py first (as root)")
    broadcast, fan = _load(args.broadcast), fan_in_costs(_load(args.fan_in))
    rows = link_rows(hosts_run)
    params = calibrate(rows)
    weights = scaled(params, hosts_run["weight_bytes"], hosts_run["links"]["megabytes"] * 2**20)
    fit = fit_sampling(hosts_run, weights)
    points = judge(latency_points(params, rows, broadcast) + sampling_points(fit, hosts_run, weights))
    prediction = predict(fit, weights, fan, args)
    _print(params, fit, points, prediction, fan)
    inputs = learner_inputs(args, fit, fan)
    learners = learner_table(inputs, fit, fan, args)
    _print_learners(learners)
    checks = [p for p in points if p["role"] == "check"]
    missed = [p for p in points if not p["within"]]
    within = sum(p["within"] for p in points)
    print(f"\n{within} of {len(points)} measured points within {TOLERANCE:.0%} "
          f"({sum(p['within'] for p in checks)} of {len(checks)} checks the calibration did not see)")
    for p in missed:
        print(f"  missed: {p['what']} ({p['role']}): model {p['predicted']:.2f} against {p['measured']:.2f}, "
              f"{100 * p['error']:+.0f}%")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    common.FIGURES.mkdir(parents=True, exist_ok=True)
    note = figure(prediction, points, hosts_run["links"]["rate"], common.FIGURES / f"{args.output.stem}.png")
    print(note)
    learner_note = learner_figure(learners, inputs, fit, fan, args,
                                  common.FIGURES / f"{args.output.stem}_learners.png")
    print(learner_note)
    common.write_results(args.output, {
        "learners": {**learners, "figure": learner_note},
        "prediction": prediction, "parameters_seconds": params, "sampling": fit,
        "calibration": {"source": args.sampling_hosts.name, "measured": hosts_run["date"],
                        "commit": hosts_run.get("commit"), "megabytes": hosts_run["links"]["megabytes"],
                        "rate": hosts_run["links"]["rate"], "security": hosts_run["links"]["security"],
                        "hosts": list(FIT_HOSTS), "weight_bytes": hosts_run["weight_bytes"],
                        "host_cpus": hosts_run.get("host_cpus"), "learner_cpus": hosts_run.get("learner_cpus")},
        "fan_in": fan, "cores_per_node": args.cores_per_node, "learner_cores": args.learner_cores,
        "steps_per_core": args.steps_per_core, "batch_size": args.batch_size or fit["batch_size"],
        "check": points, "within_tolerance": f"{within}/{len(points)}",
        "checks_within_tolerance": f"{sum(p['within'] for p in checks)}/{len(checks)}",
        "missed": [{"what": p["what"], "error": p["error"]} for p in missed], "figure": note,
        "inputs": {"sampling_hosts": str(args.sampling_hosts), "fan_in": str(args.fan_in) if fan else None,
                   "broadcast": str(args.broadcast) if broadcast else None},
    }, args.label)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
