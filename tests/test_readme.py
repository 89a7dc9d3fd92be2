"""The README's promises that a script can check: two Quick start commands, the same test command
in CI, a front page short enough to read, links that lead somewhere, and a time for the test command
that is the measured one. The configuration reference moved to the documentation site
(tests/test_docs.py)."""

from __future__ import annotations

import re
import statistics
from pathlib import Path

from benchmarks import common

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _quick_start_commands() -> list[str]:
    section = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "Quick start has no bash block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_quick_start_has_exactly_two_commands_and_ci_runs_the_test_one():
    commands = _quick_start_commands()
    assert len(commands) == 2
    assert "lamarckian-hpc train" in commands[0]
    assert "pytest" in commands[1]
    ci_script = (ROOT / ".ci" / "run").read_text()
    assert commands[1] in ci_script.splitlines()


def test_readme_is_a_front_page_of_at_most_300_lines():
    assert len(README.splitlines()) <= 300


def test_readme_links_lead_to_files():
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    missing = [target for target in targets if "://" not in target and not (ROOT / target).exists()]
    assert not missing, f"README links to missing files: {missing}"


def _minutes_on_two_cores(text: str, where: str) -> float:
    """The figure 'about N minutes on two cores' (N may end in ½) that a page gives the test command."""
    found = re.search(r"about (\d+)(½?) minutes on two cores", text)
    assert found, f"{where} gives no 'about N minutes on two cores' for the test command"
    return int(found.group(1)) + (0.5 if found.group(2) else 0.0)


def test_the_test_command_figure_is_the_measured_one_within_15_percent():
    measured = common.read_results(ROOT / "benchmarks" / "results" / "test_command.json")
    assert measured is not None, "benchmarks/results/test_command.json has no main entry"
    median = measured["median_seconds"]
    assert len(measured["runs"]) >= 3 and median == statistics.median(run["pytest_seconds"] for run in measured["runs"])
    for page in (ROOT / "README.md", ROOT / "docs" / "getting-started.md"):
        stated = _minutes_on_two_cores(page.read_text(), page.name) * 60
        assert abs(stated - median) <= 0.15 * median, \
            f"{page.name} says {stated:.0f} s for the test command, measured median {median:.0f} s " \
            f"(benchmarks/costs/test_command.py)"
