"""A model of broadcast latency and staleness for flat and tree, from 10 to 6000 cores.

Calibrated on per-hop costs that `sampling_hosts.py` measured across emulated hosts (network
namespaces with 1 Gbit links, the runtime's own publisher, relays and subscribers), checked
against the points that calibration did not use (each within 20%, or the check says which is not
and by how much), then evaluated for clusters of 40 cores per node, one actor per core (the
learner's node included), as in the paper's runs.

Latency of one weight version (a blob of B bytes) to every actor, n nodes of p actors, from four
per-hop costs, each calibrated on the smallest measurement that shows it:

- fixed cost `a`: what a version costs before any copy (serialising the header, waking the
  subscribers), and local copy `c_local`: seconds per subscriber on the same host (TCP to the
  host's own address or IPC), the intercept and slope over receivers of the 1-host points, flat
  and tree alike (on one host both are local copies only); a node's relay (or the learner, on
  its node) delivers p of them;
- link copy `c`: seconds for one copy of the blob over one host's network link, from the flat
  2-host points (flat sends (n-1)*p copies through the learner's link, all at once, fairly
  shared): the least-squares slope over (n-1)*p with the intercept held at `a`;
- hop `h`: what a relay adds besides the copies (receive, header check, re-send), the mean
  residual of the tree 2-host points, where the tree has one hop.

  flat: T = a + max(c * (n-1) * p, c_local * p)
  tree: T = a + c * r + c * k + h * hops + c_local * p, with r = min(fanout, n-1) relays fed by
        the learner at once, k = the most leaves one relay feeds, hops = (r > 0) + (k > 0), fanout
        ceil(sqrt(n)) (the learner's link carries r copies, then the relays' links k copies each).

Every point with more than 2 hosts is a check the calibration did not see: `sampling_hosts.py`'s
own 4-host points and `broadcast.py --emulate-links`'s (up to 16 hosts), when present.

Staleness in policy versions: s = alpha + beta * actors + T / U, with U the seconds per learner
update and T the model's latency for the run's own weights (the per-byte costs c and c_local
scaled by its size, a and h not). alpha and beta are a property of sampling and queueing, the
same for flat and tree, and of the run's batch and model, so each set of runs has its own: for
the `sampling_hosts.py` runs they are fitted on the flat points and the tree points are the
check; for the `staleness.py` runs (4 MB model, loopback) as before, on all of them. T / U is the
part the broadcast layout changes. At scale the table shows alpha + T / U for the 4 MB weights,
with alpha and U = `--update-seconds` (default: the mean measured) of the `staleness.py` runs,
whose model has those weights, because beta * actors depends on whether the learner keeps up with
the actors, which this machine cannot tell.

    python benchmarks/scale_model.py [--cores-per-node 40] [--update-seconds U]
                                     [--sampling-hosts PATH] [--broadcast PATH] [--staleness PATH]
                                     [--output PATH]

Reads benchmarks/results/sampling_hosts.json, broadcast.json and staleness.json, or the files
`--sampling-hosts`, `--broadcast` and `--staleness` name (`benchmarks/reproduce.py` points the
last two at the results it has just measured). Prints the calibration, the check against the
measured points and the prediction table; writes benchmarks/results/scale_model.json (or
`--output`) and, when matplotlib is installed, scale_model.png beside it (the same name, .png).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path
from typing import Any, Callable

import numpy as np

from lamarckian_hpc.comm.topology import build_tree

RESULTS = Path(__file__).resolve().parent / "results"
CORES = [10, 20, 40, 80, 160, 320, 640, 1000, 1500, 2000, 3000, 4000, 5000, 6000]
TOLERANCE = 0.20
CALIBRATION_HOSTS = (1, 2)


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
    two = [r for r in rows if r["hosts"] == 2]
    if len({r["per_node"] for r in one}) < 2 or not two:
        raise SystemExit("the calibration needs sampling_hosts.py's link points on 1 host (two receiver counts "
                         "or more) and on 2 hosts: --hosts 1 2 ... --link-receivers 1 2 ...")
    a, c_local = _line([r["per_node"] for r in one] * 2, [r["flat_s"] for r in one] + [r["tree_s"] for r in one])
    x = np.asarray([r["per_node"] for r in two], float)  # (n-1)*p copies over the learner's link, n = 2
    c = float(np.dot(x, np.asarray([r["flat_s"] for r in two]) - a) / np.dot(x, x))
    params = {"a": a, "c": c, "c_local": c_local, "h": 0.0}
    params["h"] = statistics.fmean(r["tree_s"] - tree_latency(params, 2, r["per_node"]) for r in two)
    return params


def latency_points(params: dict[str, float], rows: list[dict[str, Any]], broadcast: dict[str, Any] | None) -> list:
    points = []
    for row in rows:
        for mode, model in MODELS.items():
            points.append({"what": f"{mode} latency ms, {row['hosts']} hosts x {row['per_node']} (sampling_hosts)",
                           "receivers": row["receivers"], "measured": row[f"{mode}_s"] * 1e3,
                           "predicted": model(params, row["hosts"], row["per_node"]) * 1e3,
                           "role": "fit" if row["hosts"] in CALIBRATION_HOSTS else "check"})
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


def hosts_staleness(params: dict[str, float], hosts_run: dict[str, Any]) -> tuple[float, float, list[dict[str, Any]]]:
    """alpha and beta of the sampling_hosts runs, fitted on the flat ones; a point per run."""
    run_params = scaled(params, hosts_run["weight_bytes"], hosts_run["links"]["megabytes"] * 2**20)
    per_host = hosts_run["actors_per_host"]
    runs = [{**p, "part": MODELS[p["broadcast"]](run_params, p["hosts"], per_host) / p["update_interval_s"]}
            for p in hosts_run["points"]]
    flat = [r for r in runs if r["broadcast"] == "flat"] or runs
    alpha, beta = _line([r["actors"] for r in flat], [r["staleness_mean"] - r["part"] for r in flat])
    points = [{"what": f"{r['broadcast']} staleness, {r['hosts']} hosts x {per_host} (sampling_hosts)",
               "receivers": r["actors"], "measured": r["staleness_mean"],
               "predicted": alpha + beta * r["actors"] + r["part"],
               "role": "fit" if r["broadcast"] == "flat" else "check"} for r in runs]
    return alpha, beta, points


def loopback_latency(broadcast: dict[str, Any], mode: str, receivers: int) -> float:
    """Measured loopback latency at `receivers`, linear between (and beyond) the measured counts."""
    rows = broadcast["loopback"]["rows"]
    intercept, slope = _line([r["receivers"] for r in rows], [r[f"{mode}_median_ms"] / 1e3 for r in rows])
    return max(intercept + slope * receivers, 0.0)


def loopback_staleness(staleness: dict[str, Any], broadcast: dict[str, Any]) -> tuple[float, float, list]:
    """alpha and beta of the staleness.py runs (4 MB model, simulated nodes on loopback)."""
    rows = staleness["rows"]
    parts = [loopback_latency(broadcast, r["broadcast"], r["actors"]) / r["update_interval_s"] for r in rows]
    alpha, beta = _line([r["actors"] for r in rows], [r["staleness_mean"] - b for r, b in zip(rows, parts)])
    points = [{"what": f"{r['broadcast']} staleness (staleness.py, loopback)", "receivers": r["actors"],
               "measured": r["staleness_mean"], "predicted": alpha + beta * r["actors"] + part, "role": "fit"}
              for r, part in zip(rows, parts)]
    return alpha, beta, points


def judge(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for index, point in enumerate(points):
        error = point["predicted"] / point["measured"] - 1 if point["measured"] else float("nan")
        role = point.pop("role")  # last, after the figures, in the page's table
        points[index] = {**point, "error": error, "within": abs(error) <= TOLERANCE, "role": role}
    return points


def predict(params: dict[str, float], per_node: int, alpha: float, update_s: float) -> list[dict[str, Any]]:
    rows = []
    for cores in CORES:
        nodes, actors = math.ceil(cores / per_node), min(cores, per_node)
        flat, tree = flat_latency(params, nodes, actors), tree_latency(params, nodes, actors)
        rows.append({"cores": cores, "nodes": nodes, "fanout": build_tree([str(i) for i in range(nodes)]).fanout,
                     "flat_ms": flat * 1e3, "tree_ms": tree * 1e3,
                     "flat_staleness": alpha + flat / update_s, "tree_staleness": alpha + tree / update_s})
    return rows


def figure(rows: list[dict[str, Any]], points: list[dict[str, Any]], rate: str, path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no figure"
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(15, 4.2))
    cores = [r["cores"] for r in rows]
    left.loglog(cores, [r["flat_ms"] for r in rows], "o-", label="flat")
    left.loglog(cores, [r["tree_ms"] for r in rows], "s-", label="tree")
    left.set(xlabel="cores (40 per node)", ylabel="broadcast latency, ms (model)", title=f"4 MB weights, {rate} links")
    left.legend()
    for axis, kind, unit in ((middle, "latency", "ms"), (right, "staleness", "versions")):
        chosen = [p for p in points if f" {kind}" in p["what"]]
        if not chosen:
            continue
        logarithmic = kind == "latency"  # milliseconds to seconds; staleness spans less than a decade
        low = min(min(p["measured"], p["predicted"]) for p in chosen) * 0.8 if logarithmic else 0.0
        high = max(max(p["measured"], p["predicted"]) for p in chosen) * 1.2
        line = np.geomspace(max(low, 1e-3), high, 50) if logarithmic else np.linspace(low, high, 50)
        axis.fill_between(line, line * (1 - TOLERANCE), line * (1 + TOLERANCE), color="0.9", label="within 20%")
        axis.plot(line, line, color="0.6", lw=1)
        for mode, color in (("flat", "C0"), ("tree", "C1")):
            for role, marker in (("fit", "o"), ("check", "s")):
                mine = [p for p in chosen if p["what"].startswith(mode) and p["role"] == role]
                if mine:
                    axis.plot([p["measured"] for p in mine], [p["predicted"] for p in mine], marker, color=color,
                              mfc=color if role == "check" else "none", label=f"{mode}, {role}")
        if logarithmic:
            axis.set_xscale("log")
            axis.set_yscale("log")
        axis.set(xlabel=f"measured, {unit}", ylabel=f"model, {unit}", title=f"{kind}: model vs measured")
        axis.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"wrote {path}"


def _load(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.exists() else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores-per-node", type=int, default=40)
    parser.add_argument("--update-seconds", type=float, default=None)
    parser.add_argument("--sampling-hosts", type=Path, default=RESULTS / "sampling_hosts.json",
                        help="sampling_hosts.py's results: the per-hop costs (default: %(default)s)")
    parser.add_argument("--broadcast", type=Path, default=RESULTS / "broadcast.json",
                        help="broadcast.py's results: loopback latency, emulated checks (default: %(default)s)")
    parser.add_argument("--staleness", type=Path, default=RESULTS / "staleness.json",
                        help="staleness.py's results: staleness of the 4 MB model (default: %(default)s)")
    parser.add_argument("--output", type=Path, default=RESULTS / "scale_model.json",
                        help="results file; the figure goes beside it as .png (default: %(default)s)")
    args = parser.parse_args()
    hosts_run = _load(args.sampling_hosts)
    if hosts_run is None or not hosts_run["links"]["hosts"]:
        raise SystemExit(f"no per-hop costs in {args.sampling_hosts}: run benchmarks/sampling_hosts.py first (as root)")
    broadcast, staleness = _load(args.broadcast), _load(args.staleness)
    for name, path, value in (("broadcast", args.broadcast, broadcast), ("staleness", args.staleness, staleness)):
        print(f"{name}: {path}" + ("" if value is not None else " (missing: left out)"))
    rows = link_rows(hosts_run)
    params = calibrate(rows)
    alpha_h, beta_h, hosts_points = hosts_staleness(params, hosts_run)
    points = latency_points(params, rows, broadcast) + hosts_points
    if staleness and broadcast and "loopback" in broadcast:
        alpha, beta, loop_points = loopback_staleness(staleness, broadcast)
        points += loop_points
        measured_u = statistics.fmean(r["update_interval_s"] for r in staleness["rows"])
    else:  # no 4 MB-model runs: the sampling_hosts runs' own figures
        alpha, beta = alpha_h, beta_h
        measured_u = statistics.fmean(p["update_interval_s"] for p in hosts_run["points"])
    update_s = args.update_seconds or measured_u
    points = judge(points)
    print(f"calibration ({hosts_run['links']['megabytes']} MB, {hosts_run['links']['rate']} links, "
          f"security {hosts_run['links']['security']}, measured {hosts_run['date']}): "
          + ", ".join(f"{k} = {v * 1e3:.2f} ms" for k, v in params.items()))
    print(f"staleness across hosts: alpha = {alpha_h:.3f}, beta = {beta_h:.3f} per actor; "
          f"at scale: alpha = {alpha:.2f}, beta = {beta:.3f} per actor, U = {update_s:.3f} s")
    print("\n| measured point | receivers | measured | model | error | role |\n|---|---:|---:|---:|---:|---|")
    for p in points:
        print(f"| {p['what']} | {p['receivers']} | {p['measured']:.2f} | {p['predicted']:.2f} | "
              f"{100 * p['error']:+.0f}%{'' if p['within'] else ' (over 20%)'} | {p['role']} |")
    prediction = predict(params, args.cores_per_node, alpha, update_s)
    print("\n| cores | nodes | fan-out | flat ms | tree ms | flat staleness | tree staleness |\n"
          "|---:|---:|---:|---:|---:|---:|---:|")
    for r in prediction:
        print(f"| {r['cores']} | {r['nodes']} | {r['fanout']} | {r['flat_ms']:.0f} | {r['tree_ms']:.0f} | "
              f"{r['flat_staleness']:.2f} | {r['tree_staleness']:.2f} |")
    within = sum(p["within"] for p in points)
    checks = [p for p in points if p["role"] == "check"]
    missed = [p for p in points if not p["within"]]
    print(f"\n{within} of {len(points)} measured points within {TOLERANCE:.0%} "
          f"({sum(p['within'] for p in checks)} of {len(checks)} checks the calibration did not see)")
    for p in missed:
        print(f"  missed: {p['what']} ({p['role']}): model {p['predicted']:.2f} against {p['measured']:.2f}, "
              f"{100 * p['error']:+.0f}%")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    note = figure(prediction, points, hosts_run["links"]["rate"], args.output.with_suffix(".png"))
    print(note)
    args.output.write_text(json.dumps({
        "parameters_seconds": params,
        "calibration": {"source": args.sampling_hosts.name, "measured": hosts_run["date"],
                        "commit": hosts_run.get("commit"), "megabytes": hosts_run["links"]["megabytes"],
                        "rate": hosts_run["links"]["rate"], "security": hosts_run["links"]["security"],
                        "hosts": list(CALIBRATION_HOSTS)},
        "staleness": {"alpha": alpha, "beta_per_actor": beta, "update_seconds": update_s,
                      "across_hosts": {"alpha": alpha_h, "beta_per_actor": beta_h}},
        "cores_per_node": args.cores_per_node, "check": points, "within_tolerance": f"{within}/{len(points)}",
        "checks_within_tolerance": f"{sum(p['within'] for p in checks)}/{len(checks)}",
        "missed": [{"what": p["what"], "error": p["error"]} for p in missed],
        "prediction": prediction, "figure": note,
        "inputs": {"sampling_hosts": str(args.sampling_hosts), "broadcast": str(args.broadcast) if broadcast else None,
                   "staleness": str(args.staleness) if staleness else None},
    }, indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
