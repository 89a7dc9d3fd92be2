"""What every benchmark script shares: its common flags, the description of the machine it ran
on, and the writing of its results file.

`benchmarks` is a package that the editable install (`pip install -e .`) makes importable, so a
script in any group folder (`peers/`, `scale/`, ...) imports this module and its siblings by their
package path, run as `python benchmarks/scale/sampling.py` or as `python -m benchmarks.scale.sampling`:

    from benchmarks import common
    from benchmarks.scale.raw_bound import RawLoop

A results file (`benchmarks/results/NAME.json`) holds one benchmark's results as labelled
entries, one per run kept (`main`, `quiet`, `run2`, `pong`, ...):

    {"benchmark": "pbt_vs_tune", "entries": [{"label": "main", "date": ..., "machine": {...},
                                              "git_revision": ..., ...the run's own keys...}, ...]}

`write_results` adds an entry or replaces the one of the same label, so that running a
benchmark again under a label of its own keeps the others. Every entry it writes carries its
label, the date, the machine and the git revision of the checkout: the script's own data cannot
replace them, except that a `machine` dict of its own adds to (and overrides keys of) the
description. A script that merges a new run into its earlier one reads the entry back with
`read_results(..., provenance=False)`, which leaves those four keys out.
Only the standard library is imported here: benchmarks that measure what a process imports
(actor_footprint.py) or refuse Ray (gpu_learner_check.py) import this module too.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

BENCHMARKS = Path(__file__).resolve().parent
ROOT = BENCHMARKS.parent
RESULTS = BENCHMARKS / "results"
#: Where a benchmark draws its figures: beside the documentation pages that show them (the site
#: shows only files inside docs/), and nowhere else.
FIGURES = ROOT / "docs" / "benchmarks" / "figures"
#: The group folders, by the question their benchmarks answer.
GROUPS = ("peers", "scale", "costs", "learning", "reliability")
#: The label of an entry written without one.
DEFAULT_LABEL = "main"
#: The keys `write_results` sets on every entry.
PROVENANCE = ("label", "date", "machine", "git_revision")


def results_path(name: str) -> Path:
    """`benchmarks/results/NAME.json`: where benchmark NAME keeps its results."""
    return RESULTS / f"{name}.json"


def testcluster_nodes() -> ModuleType:
    """slurm/testcluster/testcluster_nodes.py, the test cluster's node controls (`kill_node`,
    `restore_node`, ...), loaded from its file once: slurm/ is a folder of scripts, not a package."""
    name = "testcluster_nodes"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "slurm" / "testcluster" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def git_revision(root: Path = ROOT) -> str | None:
    """The checkout's commit (short), `+dirty` when tracked files differ from it; None outside git."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True,
                                text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (commit + ("+dirty" if dirty else "")) if commit else None


def now() -> str:
    """The date and time, UTC, to the second (ISO 8601)."""
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat()


def load_average() -> list[float] | None:
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except OSError:
        return None


def machine() -> dict[str, Any]:
    """Host, CPUs, load average, Python, platform: what a reader needs to know which machine and
    how busy it was, since figures from a shared machine only compare within one run."""
    return {"host": platform.node(), "cpus": os.cpu_count(), "load_average": load_average(),
            "python": platform.python_version(), "platform": platform.platform()}


def add_common_args(parser: argparse.ArgumentParser, name: str | None = None,
                    output: bool = True) -> argparse.ArgumentParser:
    """`--label` and, for a benchmark with a results file NAME, `--output` (default
    benchmarks/results/NAME.json)."""
    if output and name is not None:
        parser.add_argument("--output", type=Path, default=results_path(name),
                            help="results file (default: %(default)s)")
    parser.add_argument("--label", default=DEFAULT_LABEL,
                        help="the entry of the results file this run writes or replaces (default: %(default)s)")
    return parser


def entries(data: Any) -> list[dict[str, Any]]:
    """The labelled entries of a results file's parsed JSON; a file of an older layout (one bare
    result) is one entry labelled `main`."""
    if isinstance(data, dict) and isinstance(data.get("entries"), list):
        return data["entries"]
    if isinstance(data, dict):
        return [{"label": DEFAULT_LABEL, **data}]
    return [{"label": DEFAULT_LABEL, "rows": data}]


def read_results(path: str | Path, label: str = DEFAULT_LABEL, provenance: bool = True) -> dict[str, Any] | None:
    """The entry labelled `label` of the results file at `path`, without its label, date, machine
    and git revision unless `provenance`; None when there is none."""
    path = Path(path)
    if not path.is_file():
        return None
    entry = next((entry for entry in entries(json.loads(path.read_text())) if entry.get("label") == label), None)
    if entry is None or provenance:
        return entry
    return {key: value for key, value in entry.items() if key not in PROVENANCE}


def write_results(path: str | Path, data: dict[str, Any], label: str = DEFAULT_LABEL, *,
                  name: str | None = None, indent: int | None = 2, quiet: bool = True) -> dict[str, Any]:
    """Writes `data` as the entry `label` of the results file at `path` (made if missing, the
    entry replaced if there), with its label, date, machine and git revision; returns the entry."""
    path = Path(path)
    own = data.get("machine")
    entry = {"label": label, "date": now(), "machine": {**machine(), **(own if isinstance(own, dict) else {})},
             "git_revision": git_revision()}
    entry.update({key: value for key, value in data.items() if key not in PROVENANCE})
    kept = entries(json.loads(path.read_text())) if path.is_file() else []
    labels = [old.get("label") for old in kept]
    if label in labels:
        kept[labels.index(label)] = entry
    else:
        kept.append(entry)
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"benchmark": name or path.stem, "entries": kept}
    path.write_text(json.dumps(document, indent=indent, default=str) + "\n")
    if not quiet:
        print(f"wrote {path} ({label})")
    return entry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="print what a results entry written now would record about "
                                                 "this machine and checkout")
    parser.parse_args(argv)
    print(json.dumps({"date": now(), "machine": machine(), "git_revision": git_revision()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
