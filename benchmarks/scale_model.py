"""A model of broadcast latency and staleness for flat and tree, from 10 to 6000 cores.

Calibrated with what `broadcast.py` and `staleness.py` measured on this machine, checked against
those measurements (each within 20%, or the check says which is not), then evaluated for clusters
of 40 cores per node, one actor per core (the learner's node included), as in the paper's runs.

Latency of one weight version (a blob of B bytes) to every actor, n nodes of p actors:

- link copy `c`: seconds for one copy of the blob over one host's network link; fitted with the
  intercept `a` on the flat points measured over emulated 1 Gbit links (flat sends
  (n-1)*p copies through the learner's link, all at once, fairly shared);
- local copy `c_local`: seconds per subscriber on the same host (IPC or loopback TCP), the slope of
  the loopback flat points; a node's relay (or the learner, on its node) delivers p of them;
- hop `h`: what a relay adds besides the copies (receive, header check, re-send), fitted on the
  tree points over emulated links.

  flat: T = a + max(c * (n-1) * p, c_local * p)
  tree: T = c * r + c * k + h * hops + c_local * p, with r = min(fanout, n-1) relays fed by the
        learner at once, k = the most leaves one relay feeds, hops = 1 + (k > 0), fanout
        ceil(sqrt(n)) (the learner's link carries r copies, then the relays' links k copies each).

Staleness in policy versions: s = alpha + beta * actors + T / U, with U the seconds per learner
update. alpha and beta are fitted on the staleness runs (they are a property of sampling and
queueing, the same for flat and tree); T / U is the part the broadcast layout changes. At scale
the table shows alpha + T / U with U = `--update-seconds` (default: the mean measured), because
beta * actors depends on whether the learner keeps up with the actors, which this machine
cannot tell.

    python benchmarks/scale_model.py [--cores-per-node 40] [--update-seconds U]

Prints the calibration, the check against the measured points and the prediction table; writes
benchmarks/results/scale_model.json and, when matplotlib is installed, scale_model.png.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path
from typing import Any

import numpy as np

from lamarckian_hpc.comm.topology import build_tree

RESULTS = Path(__file__).resolve().parent / "results"
CORES = [10, 20, 40, 80, 160, 320, 640, 1000, 1500, 2000, 3000, 4000, 5000, 6000]
TOLERANCE = 0.20


def tree_shape(nodes: int) -> tuple[int, int]:
    """(relays fed by the learner, most leaves fed by one relay) of the tree over `nodes`."""
    tree = build_tree([str(i) for i in range(nodes)])
    relays = len(tree.children_of(tree.root))
    leaves = max((len(tree.children_of(r)) for r in tree.children_of(tree.root)), default=0)
    return relays, leaves


def flat_latency(p: dict[str, float], nodes: int, per_node: int) -> float:
    return p["a"] + max(p["c"] * (nodes - 1) * per_node, p["c_local"] * per_node)


def tree_latency(p: dict[str, float], nodes: int, per_node: int) -> float:
    relays, leaves = tree_shape(nodes)
    hops = (relays > 0) + (leaves > 0)
    return p["c"] * (relays + leaves) + p["h"] * hops + p["c_local"] * per_node


def _line(x: list[float], y: list[float]) -> tuple[float, float]:
    """Least-squares intercept and slope."""
    if len(set(x)) < 2:  # one abscissa: no slope to fit
        return float(np.mean(y)), 0.0
    slope, intercept = np.polyfit(np.asarray(x, float), np.asarray(y, float), 1)
    return float(intercept), float(slope)


def calibrate(broadcast: dict[str, Any]) -> dict[str, float]:
    links = broadcast.get("emulated") or broadcast["loopback"]
    loop = broadcast.get("loopback") or links
    _, c_local = _line([r["receivers"] for r in loop["rows"]], [r["flat_median_ms"] / 1e3 for r in loop["rows"]])
    per_node = links["per_node"]
    a, c = _line([(r["nodes"] - 1) * per_node for r in links["rows"]], [r["flat_median_ms"] / 1e3 for r in links["rows"]])
    params = {"a": a, "c": c, "c_local": c_local, "h": 0.0}
    residual = []
    for row in links["rows"]:
        relays, leaves = tree_shape(row["nodes"])
        hops = (relays > 0) + (leaves > 0)
        residual.append((row["tree_median_ms"] / 1e3 - tree_latency(params, row["nodes"], per_node)) / max(hops, 1))
    params["h"] = statistics.fmean(residual)
    return params


def loopback_latency(broadcast: dict[str, Any], mode: str, receivers: int) -> float:
    """Measured loopback latency at `receivers`, linear between (and beyond) the measured counts."""
    rows = (broadcast.get("loopback") or broadcast["emulated"])["rows"]
    intercept, slope = _line([r["receivers"] for r in rows], [r[f"{mode}_median_ms"] / 1e3 for r in rows])
    return max(intercept + slope * receivers, 0.0)


def calibrate_staleness(staleness: dict[str, Any], broadcast: dict[str, Any]) -> tuple[float, float, list[float]]:
    rows = staleness["rows"]
    broadcast_part = [loopback_latency(broadcast, r["broadcast"], r["actors"]) / r["update_interval_s"] for r in rows]
    alpha, beta = _line([r["actors"] for r in rows], [r["staleness_mean"] - b for r, b in zip(rows, broadcast_part)])
    return alpha, beta, broadcast_part


def check(params: dict[str, float], broadcast: dict[str, Any], staleness: dict[str, Any] | None,
          alpha: float, beta: float, broadcast_part: list[float]) -> list[dict[str, Any]]:
    points = []
    links = broadcast.get("emulated") or broadcast["loopback"]
    for row in links["rows"]:
        for mode, model in (("flat", flat_latency), ("tree", tree_latency)):
            predicted = model(params, row["nodes"], links["per_node"]) * 1e3
            points.append({"what": f"{mode} latency ms ({links['link_mode']})", "receivers": row["receivers"],
                           "measured": row[f"{mode}_median_ms"], "predicted": predicted})
    for row, part in zip(staleness["rows"] if staleness else [], broadcast_part):
        points.append({"what": f"{row['broadcast']} staleness (loopback)", "receivers": row["actors"],
                       "measured": row["staleness_mean"], "predicted": alpha + beta * row["actors"] + part})
    for point in points:
        point["error"] = point["predicted"] / point["measured"] - 1 if point["measured"] else float("nan")
        point["within"] = abs(point["error"]) <= TOLERANCE
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


def figure(rows: list[dict[str, Any]], points: list[dict[str, Any]], path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no figure"
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    cores = [r["cores"] for r in rows]
    left.loglog(cores, [r["flat_ms"] for r in rows], "o-", label="flat")
    left.loglog(cores, [r["tree_ms"] for r in rows], "s-", label="tree")
    left.set(xlabel="cores (40 per node)", ylabel="broadcast latency, ms (model)", title="4 MB weights, 1 Gbit links")
    left.legend()
    for mode, marker, color in (("flat", "o", "C0"), ("tree", "s", "C1")):
        chosen = [p for p in points if p["what"].startswith(f"{mode} latency")]
        right.plot([p["receivers"] for p in chosen], [p["measured"] for p in chosen], marker, color=color,
                   label=f"{mode} measured")
        right.plot([p["receivers"] for p in chosen], [p["predicted"] for p in chosen], "--", color=color,
                   label=f"{mode} model")
    right.set(xlabel="receivers (2 per emulated host)", ylabel="ms", title="model vs measured")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return f"wrote {path}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores-per-node", type=int, default=40)
    parser.add_argument("--update-seconds", type=float, default=None)
    args = parser.parse_args()
    broadcast = json.loads((RESULTS / "broadcast.json").read_text())
    staleness_path = RESULTS / "staleness.json"
    staleness = json.loads(staleness_path.read_text()) if staleness_path.exists() else None
    params = calibrate(broadcast)
    alpha, beta, parts = calibrate_staleness(staleness, broadcast) if staleness else (0.0, 0.0, [])
    update_s = args.update_seconds or (statistics.fmean(r["update_interval_s"] for r in staleness["rows"])
                                       if staleness else 1.0)
    print("calibration: " + ", ".join(f"{k} = {v * 1e3:.2f} ms" for k, v in params.items())
          + f"; staleness alpha = {alpha:.2f}, beta = {beta:.3f} per actor, U = {update_s:.3f} s")
    points = check(params, broadcast, staleness, alpha, beta, parts)
    print("\n| measured point | receivers | measured | model | error |\n|---|---:|---:|---:|---:|")
    for p in points:
        print(f"| {p['what']} | {p['receivers']} | {p['measured']:.2f} | {p['predicted']:.2f} | "
              f"{100 * p['error']:+.0f}%{'' if p['within'] else ' (over 20%)'} |")
    rows = predict(params, args.cores_per_node, alpha, update_s)
    print(f"\n| cores | nodes | fan-out | flat ms | tree ms | flat staleness | tree staleness |\n"
          f"|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['cores']} | {r['nodes']} | {r['fanout']} | {r['flat_ms']:.0f} | {r['tree_ms']:.0f} | "
              f"{r['flat_staleness']:.2f} | {r['tree_staleness']:.2f} |")
    within = sum(p["within"] for p in points)
    print(f"\n{within} of {len(points)} measured points within {TOLERANCE:.0%}")
    note = figure(rows, points, RESULTS / "scale_model.png")
    print(note)
    (RESULTS / "scale_model.json").write_text(json.dumps({
        "parameters_seconds": params, "staleness": {"alpha": alpha, "beta_per_actor": beta, "update_seconds": update_s},
        "cores_per_node": args.cores_per_node, "check": points, "within_tolerance": f"{within}/{len(points)}",
        "prediction": rows, "figure": note,
    }, indent=2) + "\n")
    print(f"wrote {RESULTS / 'scale_model.json'}")


if __name__ == "__main__":
    main()
