"""How long the README's test command takes on a fresh clone: the figure the README and the
getting-started page give (`tests/test_readme.py` holds them to this file's median, within 15%).

The checkout's HEAD is cloned into a temporary folder, a virtual environment is made there and the
README's test command runs in it, word for word (`pip install -c constraints.txt -e ".[test]" &&
python3 -m pytest -q`): the install once, then the tests `--repeats` times. Each repeat's time is
pytest's own (from its summary line) beside the wall time of the whole command; the median of the
repeats is the figure. `--python` runs the tests with an interpreter whose environment already has
the test extra, and skips the install (its time is then not measured).

    python benchmarks/costs/test_command.py [--repeats 3]

Prints a Markdown table and writes benchmarks/results/test_command.json.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import common

#: The README's test command, in its two halves.
INSTALL = ["-m", "pip", "install", "-c", "constraints.txt", "-e", ".[test]"]
TESTS = ["-m", "pytest", "-q"]
#: pytest's last line: "1063 passed, 65 skipped, 15 warnings in 213.77s (0:03:33)".
SUMMARY = re.compile(r"^=*\s*(?P<counts>.*?) in (?P<seconds>[0-9.]+)s", re.M)


def counts(summary: str) -> dict[str, int]:
    """{'passed': 1063, 'skipped': 65, ...} from the counts part of pytest's summary line."""
    return {name: int(number) for number, name in re.findall(r"(\d+) (\w+)", summary)}


def run_tests(python: str, clone: Path) -> dict[str, object]:
    started = time.monotonic()
    done = subprocess.run([python, *TESTS], cwd=clone, capture_output=True, text=True)
    wall = time.monotonic() - started
    found = list(SUMMARY.finditer(done.stdout))
    if done.returncode != 0 or not found:
        tail = (done.stdout + done.stderr)[-3000:]
        raise SystemExit(f"the test command failed (exit {done.returncode}):\n{tail}")
    last = found[-1]
    return {"pytest_seconds": float(last.group("seconds")), "wall_seconds": round(wall, 2),
            **counts(last.group("counts"))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="runs of the tests (default: %(default)s)")
    parser.add_argument("--python", help="an interpreter that already has the test extra: no fresh environment")
    common.add_common_args(parser, "test_command")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")

    with tempfile.TemporaryDirectory(prefix="lamarckian-test-command-") as folder:
        clone = Path(folder) / "clone"
        subprocess.run(["git", "clone", "-q", str(common.ROOT), str(clone)], check=True)
        revision = common.git_revision(clone)
        install_seconds = None
        python = args.python
        if python is None:
            subprocess.run([sys.executable, "-m", "venv", str(Path(folder) / "venv")], check=True)
            python = str(Path(folder) / "venv" / "bin" / "python3")
            print(f"installing the test extra into a fresh environment ({clone})", flush=True)
            started = time.monotonic()
            subprocess.run([python, *INSTALL], cwd=clone, check=True)
            install_seconds = round(time.monotonic() - started, 1)
        runs = []
        for repeat in range(args.repeats):
            print(f"run {repeat + 1} of {args.repeats}: python3 -m pytest -q", flush=True)
            runs.append(run_tests(python, clone))
            print(f"  {runs[-1]['pytest_seconds']:.1f} s (pytest), {runs[-1]['wall_seconds']:.1f} s (wall)", flush=True)

    median = statistics.median(run["pytest_seconds"] for run in runs)
    result = {"clone_revision": revision, "install_seconds": install_seconds, "runs": runs,
              "median_seconds": median, "median_wall_seconds": statistics.median(run["wall_seconds"] for run in runs)}
    print("\n| run | pytest s | wall s | passed | skipped |\n|---:|---:|---:|---:|---:|")
    for number, run in enumerate(runs, 1):
        print(f"| {number} | {run['pytest_seconds']:.1f} | {run['wall_seconds']:.1f} | {run.get('passed', 0)} "
              f"| {run.get('skipped', 0)} |")
    print(f"\nmedian {median:.1f} s; install {install_seconds if install_seconds is not None else '-'} s")
    common.write_results(args.output, result, args.label, name="test_command", quiet=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
