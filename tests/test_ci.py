"""`.ci/run` runs the README's Quick start word for word, in a fresh virtual environment, before it
installs anything else; and every test file it names for the lowest-versions pass exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CI = (ROOT / ".ci" / "run").read_text().splitlines()


def _quick_start() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "the README's Quick start has no bash block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def _commands() -> list[str]:
    return [line.strip() for line in CI if line.strip() and not line.lstrip().startswith("#")]


def test_ci_runs_the_quick_start_first_in_a_fresh_virtual_environment():
    commands = _commands()
    quick_start = _quick_start()
    assert len(quick_start) == 2
    positions = [commands.index(command) for command in quick_start]  # word for word, each a line of its own
    assert positions == sorted(positions)
    between = commands[positions[0] + 1:positions[1]]
    assert all(command.startswith("step ") for command in between), f"run between the two: {between}"
    before = commands[:positions[0]]
    venv = [i for i, command in enumerate(before) if re.match(r"python3 -m venv ", command)]
    assert venv, "no fresh virtual environment before the Quick start"
    activated = [command for command in before[venv[-1]:] if command.startswith("source ") and "/bin/activate" in command]
    assert activated, "the fresh virtual environment is not activated before the Quick start"
    installs = [command for command in before if re.search(r"\b(pip|apt-get)\b|install\.sh|install_football", command)]
    assert installs == [], f"installed before the Quick start: {installs}"


def test_the_second_pass_runs_what_skipped_with_the_parts_required():
    commands = _commands()
    second = [i for i, command in enumerate(commands) if "--skipped-last-run" in command]
    assert len(second) == 1
    before = "\n".join(commands[:second[0]])
    for part in ("SLURM", "MPI", "FOOTBALL", "ATARI", "HDF5_READERS", "WANDB", "MLFLOW"):
        assert f"LAMARCKIAN_HPC_REQUIRE_{part}=1" in before
    assert "testcluster/start.sh" in before and "install_football.sh" in before
    # tests/test_run_file_readers.py: h5dump of HDF5 1.10, and an h5py on an older HDF5 in a venv of its own
    assert re.search(r"apt-get install .*\bhdf5-tools\b", before)
    older = re.search(r'export LAMARCKIAN_HPC_OLDER_H5PY_PYTHON="(\$work/[^/"]+)/bin/python"', before)
    assert older and f'python3 -m venv "{older.group(1)}"' in before
    assert re.search(rf'"{re.escape(older.group(1))}/bin/pip" install .*"h5py==3\.9\.0"', before)
    extras = {extra for group in re.findall(r'pip install -q -c constraints\.txt -e "\.\[([a-z,]+)\]"', before)
              for extra in group.split(",")}
    assert {"wandb", "mlflow"} <= extras  # tests/test_tracking_sinks.py


def test_the_lowest_versions_pass_uses_constraints_min_in_a_venv_of_its_own():
    commands = _commands()
    install = [i for i, command in enumerate(commands) if "-c constraints-min.txt" in command]
    assert len(install) == 1
    before = [command.replace('"', "") for command in commands[:install[0]]]
    venvs = [command.split()[3] for command in before if command.startswith("python3 -m venv ")]
    assert len(venvs) >= 2 and venvs[-1] not in venvs[:-1], "the lowest versions need a virtual environment of their own"
    assert f"source {venvs[-1]}/bin/activate" in before
    assert any('-m "not slow"' in command for command in commands[install[0]:])


def test_constraints_min_pins_the_lowest_version_of_every_declared_range():
    """constraints-min.txt must follow pyproject.toml: each pin is the declared lower bound."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import Version

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = [Requirement(text) for text in project["dependencies"] + project["optional-dependencies"]["test"]
                + project["optional-dependencies"]["analysis"] + project["optional-dependencies"]["multiagent"]]
    pins = {}
    for line in (ROOT / "constraints-min.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = version.strip()
    for requirement in declared:
        if canonicalize_name(requirement.name) == "lamarckian-hpc":
            continue
        lower = [spec.version for spec in requirement.specifier if spec.operator in (">=", "==")]
        assert lower, f"{requirement} declares no lower bound"
        pinned = pins.get(canonicalize_name(requirement.name))
        assert pinned is not None and Version(pinned) == Version(lower[0]), \
            f"constraints-min.txt pins {requirement.name}=={pinned}, " \
            f"pyproject.toml's lower bound is {lower[0]}"
