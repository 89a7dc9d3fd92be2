"""The `test` extra brings everything the tests import: in an environment with only that extra,
collecting the suite finds no error (the tests of optional parts skip with their reason instead).

The environment is simulated in this one: every installed distribution that the package with
its `test` extra does not require, directly or through other packages (mpi4py, mpich, the
football engine, the docs tools, ...), is made unimportable in a fresh interpreter that then
collects the suite. CI's first pass checks the same thing for real, in a fresh virtual
environment with only the `test` extra installed.
"""

from __future__ import annotations

import importlib.metadata as metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "lamarckian-hpc"
#: Installed with every environment, whatever the package requires.
TOOLING = {"pip", "setuptools", "wheel"}

BLOCKER = r'''
import importlib.abc, sys
BLOCKED = set(sys.argv[1].split(",")) - {""}

class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (not in the test extra)", name=name)
        return None

sys.meta_path.insert(0, Blocked())
for name in BLOCKED:
    try:
        __import__(name)
    except ModuleNotFoundError:
        continue
    raise SystemExit(f"{name} was not blocked")
import pytest
sys.exit(pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "tests"]))
'''


def _closure(name: str, extras: frozenset[str] = frozenset()) -> set[str]:
    """The installed distributions that `name[extras]` requires, transitively, itself included."""
    seen: set[str] = set()
    pending = [(name, extras)]
    while pending:
        current, wanted = pending.pop()
        key = canonicalize_name(current)
        try:
            requires = metadata.requires(current) or []
        except metadata.PackageNotFoundError:
            continue
        if key in seen and not wanted:
            continue
        seen.add(key)
        for text in requires:
            requirement = Requirement(text)
            environments = [{"extra": extra} for extra in wanted] or [{"extra": ""}]
            if requirement.marker is None or any(requirement.marker.evaluate(env) for env in environments):
                pending.append((requirement.name, frozenset(requirement.extras)))
    return seen


def _modules_outside(kept: set[str]) -> set[str]:
    """Top-level module names that only distributions outside `kept` provide."""
    providers = metadata.packages_distributions()
    return {module for module, dists in providers.items()
            if not module.startswith("_") and module.isidentifier()
            and all(canonicalize_name(dist) not in kept for dist in dists)}


@pytest.mark.second_pass
def test_the_test_extra_requires_what_the_suite_imports_at_collection():
    kept = _closure(PACKAGE, frozenset({"test"})) | TOOLING
    assert {"pytest", "hypothesis", "python-hostlist", "submitit", "pettingzoo", "pygame-ce"} <= kept
    blocked = _modules_outside(kept)
    # An environment with only the test extra has none of the optional parts that a full CI
    # pass demands, so the switches that turn their absence into errors are not passed on.
    env = {name: value for name, value in os.environ.items()
           if not name.startswith("LAMARCKIAN_HPC_REQUIRE_")}
    done = subprocess.run([sys.executable, "-c", BLOCKER, ",".join(sorted(blocked))], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env=env)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"collection with only the test extra failed (blocked: {sorted(blocked)}):\n" \
                                 f"{output[-4000:]}"
    assert "error" not in output.lower().split("tests collected")[-1], output[-2000:]

