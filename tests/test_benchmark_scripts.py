"""The benchmark scripts: every one starts and answers --help from its group folder, and the
shared module writes results files as labelled entries. Nothing here runs a benchmark."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
SCRIPTS = sorted(path for path in BENCHMARKS.rglob("*.py") if "results" not in path.parts)

sys.path.insert(0, str(BENCHMARKS))
import common  # noqa: E402  (benchmarks/common.py)


def test_scripts_sit_in_their_group_folders() -> None:
    assert {path.parent.name for path in SCRIPTS} == {"benchmarks", *common.GROUPS}
    assert [path.name for path in SCRIPTS if path.parent == BENCHMARKS] == ["common.py", "reproduce.py"]


@pytest.mark.parametrize("script", SCRIPTS, ids=[str(path.relative_to(BENCHMARKS)) for path in SCRIPTS])
def test_every_script_answers_help(script: Path) -> None:
    """Imports resolve (the group's siblings, common.py, the package) and the arguments parse; a
    helper module without a command line just imports."""
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, cwd=ROOT,
                          timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    if '__name__ == "__main__"' in script.read_text():
        assert "usage:" in done.stdout, done.stdout[-500:]


def test_results_entries_keep_other_labels_and_carry_provenance(tmp_path: Path) -> None:
    path = tmp_path / "example.json"
    common.write_results(path, {"rows": [1], "date": "stale", "machine": {"cpu_model": "x"}})
    common.write_results(path, {"rows": [2]}, "quiet")
    common.write_results(path, {"rows": [3]})
    document = json.loads(path.read_text())
    assert document["benchmark"] == "example"
    assert [(entry["label"], entry["rows"]) for entry in document["entries"]] == [("main", [3]), ("quiet", [2])]
    for entry in document["entries"]:
        assert entry["date"] != "stale" and entry["machine"]["host"] and "load_average" in entry["machine"]
        assert "git_revision" in entry
    assert common.read_results(path, "quiet", provenance=False) == {"rows": [2]}
    assert common.read_results(path, "missing") is None


def test_committed_results_are_labelled_entries() -> None:
    for path in sorted(common.RESULTS.glob("*.json")):
        document = json.loads(path.read_text())
        labels = [entry["label"] for entry in document["entries"]]
        assert document["benchmark"] == path.stem and len(labels) == len(set(labels)) and "main" in labels, path
