"""The README's promises that a script can check: two Quick start commands, the same test command
in CI, a front page short enough to read, and links that lead somewhere. The configuration
reference moved to the documentation site (tests/test_docs.py)."""

from __future__ import annotations

import re
from pathlib import Path

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
