"""The architecture of docs/architecture.md, checked on the source: which top-level folder (or
module) of the package may import which (`ALLOWED_IMPORTS`, the one table the page's rules come
from), no import cycle between them, and the pure layers free of transport, process and file
libraries."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "lamarckian_hpc"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
PURE = ("rl", "ec", "mdp", "models", "envs")
FORBIDDEN_IN_PURE = {"ray", "zmq", "threading", "h5py", "multiprocessing", "mpi4py", "submitit"}

#: Top-level folder (or module) of `lamarckian_hpc` -> the others it may import, at module level or
#: inside a function. docs/architecture.md lists the same table; the tests below hold both to the code.
ALLOWED_IMPORTS: dict[str, set[str]] = {
    "config": set(),
    "comm": set(),
    "storage": set(),
    "ec": set(),
    "mdp": set(),
    "run_result": set(),
    "envs": {"mdp"},
    "models": {"config"},
    "rl": {"config", "mdp", "models"},
    "games": {"config", "ec"},
    "league": {"config", "storage"},
    "multiagent": {"config", "mdp", "models", "rl"},
    "analysis": {"envs", "league", "storage"},
    "runtime": {"comm", "config", "envs", "mdp", "models", "multiagent", "rl", "storage"},
    "trained": {"config", "mdp", "models", "runtime", "storage"},
    "population": {"comm", "config", "ec", "games", "run_result", "runtime", "storage"},
    "evorl": {"config", "ec", "envs", "games", "league", "mdp", "models", "multiagent", "population", "rl",
              "run_result", "runtime", "storage", "trained"},
    "library": {"config", "evorl", "mdp", "population", "run_result", "runtime", "storage", "trained"},
    "cluster": {"config", "library", "run_result", "runtime", "storage"},
    "progress": {"runtime"},
    "cli_results": {"config", "evorl", "population", "run_result"},
    "cli": {"analysis", "cli_results", "cluster", "config", "library", "progress", "run_result", "storage",
            "trained"},
    "docs_reference": {"cluster", "config"},
    "__main__": {"cli"},
}


#: The rooms of `runtime/` (the folder's own modules are the room `runtime`: what both sides of a run
#: agree on) -> the rooms each may import. The actor side never imports the learner side, and a
#: room imports no room above it. docs/architecture.md names the same rooms.
RUNTIME_ROOMS: dict[str, set[str]] = {
    "runtime": set(),
    "actor": {"runtime"},
    "sinks": {"runtime"},
    "placement": {"runtime", "actor"},
    "learner": {"runtime", "actor", "placement"},
    "runners": {"runtime", "actor", "placement", "learner", "sinks"},
}


def _units() -> set[str]:
    """The package's top-level folders and modules (not the package's own __init__)."""
    return ({path.name for path in PACKAGE.iterdir() if path.is_dir() and (path / "__init__.py").exists()}
            | {path.stem for path in PACKAGE.glob("*.py") if path.name != "__init__.py"})


def _unit_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else path.stem


def _module_name(path: Path) -> tuple[str, str]:
    """(dotted module, the package its relative imports start from)."""
    parts = ("lamarckian_hpc", *path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), ".".join(parts[:-1])
    return ".".join(parts), ".".join(parts[:-1])


def _package_imports(path: Path) -> set[str]:
    """Absolute names of everything of lamarckian_hpc a file imports, anywhere in the file (module level
    and inside functions), relative imports resolved; `from lamarckian_hpc import x` counts as `.x`."""
    _, package = _module_name(path)
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
    return {name for name in found if name.startswith("lamarckian_hpc.")}


def import_graph() -> dict[str, dict[str, list[str]]]:
    """unit -> {imported unit -> the files that import it}."""
    units = _units()
    graph: dict[str, dict[str, list[str]]] = {unit: {} for unit in units}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "__init__.py":
            continue
        source = _unit_of(path)
        for name in _package_imports(path):
            target = name.split(".")[1]
            if target in units and target != source:
                graph[source].setdefault(target, []).append(str(path.relative_to(ROOT)))
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of a directed graph, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt] if nxt in path else [node, nxt]
            if nxt not in state and (found := visit(nxt, [*path, nxt])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_every_folder_of_the_package_is_in_the_table():
    assert _units() == set(ALLOWED_IMPORTS), "add the folder to ALLOWED_IMPORTS (and docs/architecture.md)"


def test_imports_between_folders_are_exactly_the_table():
    """Every import between folders is allowed by the table, and every entry of the table is used,
    so the table (and the page) says what the code does."""
    graph = import_graph()
    broken = {f"{source} -> {target} ({files[0]})" for source, targets in graph.items()
              for target, files in targets.items() if target not in ALLOWED_IMPORTS.get(source, set())}
    assert not broken, f"imports the table does not allow: {sorted(broken)}"
    unused = {f"{source} -> {target}" for source, targets in ALLOWED_IMPORTS.items()
              for target in targets if target not in graph.get(source, {})}
    unused -= {f"{source} -> {target}" for source, target in _imports_by_name()}
    assert not unused, f"allowed imports no module makes (remove them from the table and the page): {sorted(unused)}"


def test_no_import_cycle_between_folders():
    assert _cycle(ALLOWED_IMPORTS) is None, f"the table has a cycle: {_cycle(ALLOWED_IMPORTS)}"
    real = {source: set(targets) for source, targets in import_graph().items()}
    assert _cycle(real) is None, f"import cycle between folders: {' -> '.join(_cycle(real))}"


def test_the_cycle_check_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


#: Who imports the functions a population program's entry names: the library its runner, the
#: command line's result tables its result table.
_CALLERS = {"runner": "library", "result_table": "cli_results"}


def _population_programs() -> list:
    from lamarckian_hpc.config.programs import EVOLUTION, POPULATION_PROGRAMS

    return [EVOLUTION, *POPULATION_PROGRAMS.values()]


def _imports_by_name() -> set[tuple[str, str]]:
    """(importing unit, imported unit) of the functions `config.programs` names by import path,
    which the library and `cli_results` load when a run starts or its result is printed: ast does
    not see those imports."""
    return {(caller, getattr(program, part).split(".")[1]) for program in _population_programs()
            for part, caller in _CALLERS.items()}


def test_population_programs_name_functions_their_callers_may_import():
    for program in _population_programs():
        for part, caller in _CALLERS.items():
            name = getattr(program, part)
            assert name.startswith("lamarckian_hpc."), name
            assert name.split(".")[1] in ALLOWED_IMPORTS[caller], f"{caller} may not import {name}"
            assert callable(program.load(part)), name


def _page_table() -> dict[str, set[str]]:
    """The table under "## What may import what" of docs/architecture.md: | `folder` | `a`, `b` |."""
    section = ARCHITECTURE.read_text().split("## What may import what\n", 1)[1].split("\n## ", 1)[0]
    table: dict[str, set[str]] = {}
    for row in re.findall(r"^\| `([\w]+)` \| (.*) \|$", section, flags=re.MULTILINE):
        table[row[0]] = set(re.findall(r"`(\w+)`", row[1]))
    return table


def test_the_architecture_page_states_the_table():
    assert _page_table() == ALLOWED_IMPORTS


def test_the_layers_drawn_on_the_page_follow_the_table():
    """The layer drawing of docs/architecture.md: every folder once, each importing only from the
    lines below its own."""
    drawing = ARCHITECTURE.read_text().split("## Layout\n", 1)[1].split("```\n", 2)[1]
    layers = [re.findall(r"\b(\w+)\b", line.split("(")[0]) for line in drawing.splitlines() if line.strip()]
    assert sorted(unit for layer in layers for unit in layer) == sorted(ALLOWED_IMPORTS)
    for depth, layer in enumerate(layers):
        below = {unit for lower in layers[depth + 1:] for unit in lower}
        for unit in layer:
            assert ALLOWED_IMPORTS[unit] <= below, f"{unit} imports {ALLOWED_IMPORTS[unit] - below}, not below it"


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


#: Where algorithms are told apart by their config: the config models themselves and the tables of entries.
ALGORITHM_TABLES = ("runtime/algorithms.py", "population/evolve_components.py")


def _algorithm_config_names() -> set[str]:
    from lamarckian_hpc.config.evolve import EVOLVE_ALGORITHMS
    from lamarckian_hpc.config.train import ALGORITHMS

    return ({model.__name__ for table in (ALGORITHMS, EVOLVE_ALGORITHMS) for model in table.values()}
            | {program.config.__name__ for program in _population_programs()})


def test_algorithms_are_told_apart_only_by_their_entries():
    """No isinstance over an algorithm's config outside config/ and the entry tables: the runtime,
    the population workflow, the CLI and the cluster look the algorithm's entry up, so adding one
    touches its own files and one table, not a ladder in each process."""
    names = _algorithm_config_names()
    assert {"PPOConfig", "DQNConfig", "NSGA2Config", "CMAESConfig", "PBTConfig"} <= names
    ladders = []
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith("config/") or relative in ALGORITHM_TABLES:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance" and len(node.args) == 2:
                checked = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
                checked |= {n.attr for n in ast.walk(node.args[1]) if isinstance(n, ast.Attribute)}
                if checked & names:
                    ladders.append(f"{relative}:{node.lineno} isinstance(..., {', '.join(sorted(checked & names))})")
    assert not ladders, f"look the algorithm's entry up instead: {ladders}"



def test_the_cluster_job_calls_the_library_not_the_command_line():
    """The Slurm job runs a config with `lamarckian_hpc.library.run`; the commands sit on top of the
    library, never under the cluster code a job imports (the table gives cluster no cli)."""
    assert not {"cli", "cli_results"} & ALLOWED_IMPORTS["cluster"]
    assert "lamarckian_hpc.library.run" in _package_imports(PACKAGE / "cluster" / "job.py")


def _room_of(module: str) -> str | None:
    """The room of `runtime/` a dotted module is in, or None outside runtime."""
    parts = module.split(".")
    if parts[:2] != ["lamarckian_hpc", "runtime"]:
        return None
    return parts[2] if len(parts) > 3 and parts[2] in RUNTIME_ROOMS else "runtime"


def _module_files() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package (packages by their __init__)."""
    return {_module_name(path)[0]: path for path in PACKAGE.rglob("*.py")}


def _imported_modules(path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules a file imports, anywhere in it: `from a import b` is module `a.b` when
    that is a module, else `a`; any other name is taken to the longest module it names."""
    _, package = _module_name(path)

    def longest(name: str) -> str | None:
        parts = name.split(".")
        return next((".".join(parts[:cut]) for cut in range(len(parts), 1, -1) if ".".join(parts[:cut]) in modules),
                    None)

    found: set[str | None] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(longest(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else longest(base))
    return {name for name in found if name is not None and name.startswith("lamarckian_hpc.")}


def test_runtime_is_split_into_rooms_by_process():
    folders = {path.name for path in (PACKAGE / "runtime").iterdir() if (path / "__init__.py").exists()}
    assert folders == set(RUNTIME_ROOMS) - {"runtime"}, "add the room to RUNTIME_ROOMS and docs/architecture.md"


def test_imports_between_runtime_rooms_follow_the_table():
    modules = _module_files()
    broken = []
    for module, path in modules.items():
        room = _room_of(module)
        if room is None:
            continue
        for imported in _imported_modules(path, modules):
            target = _room_of(imported)
            if target is not None and target != room and target not in RUNTIME_ROOMS[room]:
                broken.append(f"{path.relative_to(ROOT)} ({room}) imports {imported} ({target})")
    assert not broken, broken
    assert _cycle(RUNTIME_ROOMS) is None


def test_the_architecture_page_names_the_runtime_rooms():
    section = ARCHITECTURE.read_text().split("## The rooms of runtime\n", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `([\w]+)` \| (.*?) \|", section, flags=re.MULTILINE))
    assert {room: set(re.findall(r"`(\w+)`", rows[room])) for room in rows} == RUNTIME_ROOMS


def test_no_import_cycle_between_files():
    """Every module of the package: no two (or more) files import each other, at module level or
    inside a function (a lazy import still ties the two modules together)."""
    modules = _module_files()
    graph = {module: _imported_modules(path, modules) - {module} for module, path in modules.items()}
    assert _cycle(graph) is None, f"import cycle between files: {' -> '.join(_cycle(graph))}"


#: docs/architecture.md: no module of the package grows past this many lines.
MAX_MODULE_LINES = 600


def test_no_module_grows_past_the_line_limit():
    lines = {str(path.relative_to(ROOT)): len(path.read_text().splitlines()) for path in PACKAGE.rglob("*.py")}
    over = {path: count for path, count in sorted(lines.items()) if count > MAX_MODULE_LINES}
    assert not over, f"modules over {MAX_MODULE_LINES} lines (split them by concept): {over}"
    assert f"past {MAX_MODULE_LINES} lines" in ARCHITECTURE.read_text()


def test_benchmarks_and_analysis_import_without_path_edits():
    """benchmarks/ is a package of the editable install (benchmarks/common.py): its scripts and the
    analysis scripts import what they share by package path, never by editing sys.path."""
    edits = [str(path.relative_to(ROOT)) for folder in ("benchmarks", "analysis")
             for path in sorted((ROOT / folder).rglob("*.py")) if "sys.path.insert" in path.read_text()]
    assert not edits, f"sys.path.insert in: {edits}"


def test_benchmark_figures_have_one_copy_beside_the_pages():
    """The benchmarks draw into docs/benchmarks/figures/ (benchmarks/common.py's FIGURES), which the
    site shows; a copy under benchmarks/ would drift from it."""
    assert not sorted(str(path.relative_to(ROOT)) for path in (ROOT / "benchmarks").rglob("*.png"))
