"""The dependency rules of DESIGN.md, checked on the source: algorithms and the MDP interface stay
free of transport, process and file libraries; comm and storage stay leaves."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "lamarckian_hpc"
PURE = ("rl", "ec", "mdp", "models", "envs")
FORBIDDEN_IN_PURE = {"ray", "zmq", "threading", "h5py", "multiprocessing", "mpi4py", "submitit"}
LEAVES = ("comm", "storage")
FORBIDDEN_IN_LEAVES = {"rl", "ec", "runtime", "evorl", "cli", "cluster", "mdp", "models"}


def _imports(path: Path) -> set[tuple[int, str]]:
    """(relative level, dotted module) of every import in a file."""
    found: set[tuple[int, str]] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update((0, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.add((node.level, node.module or ""))
    return found


def _files(folder: str) -> list[Path]:
    return sorted((PACKAGE / folder).rglob("*.py")) if (PACKAGE / folder).is_dir() else []


@pytest.mark.parametrize("folder", PURE)
def test_pure_layers_import_no_transport_or_files(folder):
    for path in _files(folder):
        for level, module in _imports(path):
            if level == 0:
                assert module.split(".")[0] not in FORBIDDEN_IN_PURE, f"{path} imports {module}"


@pytest.mark.parametrize("folder", LEAVES)
def test_leaves_import_nothing_above_them(folder):
    for path in _files(folder):
        for level, module in _imports(path):
            first = module.split(".")[0]
            if level >= 2 or (level == 0 and first == "lamarckian_hpc"):
                top = module.split(".")[1] if level == 0 and "." in module else first
                assert top not in FORBIDDEN_IN_LEAVES, f"{path} imports {module}"


def test_no_module_grows_past_the_size_rule():
    too_long = [(p, n) for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > 450]
    assert not too_long, f"split these modules: {too_long}"



def _imported_modules(path: Path, package: str) -> set[str]:
    """Absolute names of the modules a file imports, `from . import x` counted as importing `.x`."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def test_the_cluster_job_calls_the_library_not_the_command_line():
    """The Slurm job runs a config with `lamarckian_hpc.library.run`; the commands sit on top of the
    library, never under the cluster code a job imports."""
    for path in _files("cluster"):
        imported = _imported_modules(path, "lamarckian_hpc.cluster")
        assert not {name for name in imported if name == "lamarckian_hpc.cli" or name.startswith("lamarckian_hpc.cli.")
                    or name == "lamarckian_hpc.cli_results"}, f"{path} imports the command line"
    assert "lamarckian_hpc.library.run" in _imported_modules(PACKAGE / "cluster" / "job.py", "lamarckian_hpc.cluster")
