"""The README's promises that a script can check: two Quick start commands, the same test
command in CI, and a reference entry for every config field."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel

from lamarckian_hpc.config import ALGORITHMS, EvolveConfig, RunConfig

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


def _field_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    paths = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            paths += _field_paths(annotation, f"{prefix}{name}.")
        else:
            paths.append(f"{prefix}{name}")
    return paths


def test_every_config_field_is_in_the_reference():
    paths = [path for path in _field_paths(RunConfig) if path != "algorithm"]
    for algorithm in ALGORITHMS.values():
        paths += _field_paths(algorithm, "algorithm.")
    missing = [path for path in paths if f"`{path}`" not in README]
    assert not missing, f"README's configuration reference lacks {missing}"


def test_every_evolve_config_field_is_in_the_reference():
    missing = [path for path in _field_paths(EvolveConfig) if f"`{path}`" not in README]
    assert not missing, f"README's evolve reference lacks {missing}"
