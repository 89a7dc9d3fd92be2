"""The benchmark scripts: every one starts and answers --help from its group folder, and the
shared module writes results files as labelled entries. Nothing here runs a benchmark."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import common

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
SCRIPTS = sorted(path for path in BENCHMARKS.rglob("*.py") if "results" not in path.parts and path.name != "__init__.py")


def test_scripts_sit_in_their_group_folders() -> None:
    assert {path.parent.name for path in SCRIPTS} == {"benchmarks", *common.GROUPS}
    assert [path.name for path in SCRIPTS if path.parent == BENCHMARKS] == ["common.py", "reproduce.py"]


#: Runs each script named on its command line as `python SCRIPT --help` would, in a child forked
#: from one interpreter that has already imported the heavy libraries (a fresh interpreter per
#: script costs about 2 s of imports, 50 scripts a minute of the test run); prints one JSON line.
HELP_DRIVER = r"""
import json, os, runpy, sys, tempfile, traceback
import numpy, torch, h5py, gymnasium, lamarckian_hpc.cli  # noqa: F401 - shared by the children
answers = {}
for script in sys.argv[1:]:
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        pid = os.fork()
        if pid == 0:
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            sys.argv, sys.path[0] = [script, "--help"], os.path.dirname(script)
            code = 0
            try:
                runpy.run_path(script, run_name="__main__")
            except SystemExit as exit:
                code = exit.code if isinstance(exit.code, int) else int(exit.code is not None)
            except BaseException:
                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        out.seek(0)
        err.seek(0)
        answers[script] = [os.waitstatus_to_exitcode(status), out.read(), err.read()]
print(json.dumps(answers))
"""


@pytest.mark.second_pass  # over 15 s on two cores
def test_every_script_answers_help() -> None:
    """Imports resolve (the group's siblings, common.py, the package) and the arguments parse; a
    helper module without a command line just imports."""
    done = subprocess.run([sys.executable, "-c", HELP_DRIVER, *map(str, SCRIPTS)], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    answers = json.loads(done.stdout.splitlines()[-1])
    failed = {}
    for script in SCRIPTS:
        code, out, err = answers[str(script)]
        if code != 0:
            failed[str(script.relative_to(BENCHMARKS))] = err[-1500:]
        elif '__name__ == "__main__"' in script.read_text() and "usage:" not in out:
            failed[str(script.relative_to(BENCHMARKS))] = f"no usage in: {out[-500:]}"
    assert not failed, "\n\n".join(f"{name}:\n{why}" for name, why in failed.items())


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


@pytest.mark.second_pass  # over 15 s on two cores
def test_the_gpu_check_dry_run_writes_its_checks_and_rows(tmp_path: Path) -> None:
    """The GPU check runs only where a GPU is lent, so its CPU dry run keeps it working between
    those runs: the same code path, small batches, no Ray."""
    output = tmp_path / "gpu_learner_check.json"
    done = subprocess.run([sys.executable, str(BENCHMARKS / "scale" / "gpu_learner_check.py"), "--device", "cpu",
                           "--quick", "--budget-seconds", "60", "--output", str(output)],
                          capture_output=True, text=True, cwd=ROOT, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    entry = common.read_results(output)
    assert entry is not None and entry["ray_imported"] is False
    assert not [key for key in entry["checks"] if key.endswith("_error")], entry["checks"]
    assert entry["checks"]["adam_fused_vs_torch_fused_ok"] and entry["checks"]["ppo_learner_graph_vs_eager_ok"]
    assert [(row["workload"], row["device"]) for row in entry["rows"]] == [
        ("pong-nature", "cpu"), ("cartpole", "cpu"), ("football", "cpu")]
    assert all(row["steps_per_second"] > 0 for row in entry["rows"])
