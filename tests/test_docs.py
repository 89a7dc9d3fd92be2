"""The documentation site says what the code does: the configuration reference is what the config
models generate and covers every field, the benchmark tables are what the results files hold,
every page is in the navigation, and every link resolves."""

from __future__ import annotations

import importlib
import os
import pkgutil
import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

import lamarckian_hpc.config
from lamarckian_hpc.config import ALGORITHMS, EVOLVE_ALGORITHMS, Section
from lamarckian_hpc.docs_reference import documented_models, reference_markdown, roots, validates

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
REFERENCE = DOCS / "reference" / "configuration.md"
GENERATE = "python -m lamarckian_hpc.docs_reference > docs/reference/configuration.md"


def test_configuration_reference_is_what_the_models_generate():
    assert REFERENCE.read_text() == reference_markdown(), f"the reference is out of date: run {GENERATE}"


def _field_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every settable field as a dotted path: sections are walked into, a discriminated union into
    each member, and a mapping of sections into its entries as `<name>`."""
    paths = []
    for name, field in model.model_fields.items():
        annotation, path = field.annotation, f"{prefix}{name}"
        members = [arg for arg in typing.get_args(annotation) if isinstance(arg, type) and issubclass(arg, BaseModel)]
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            paths += _field_paths(annotation, f"{path}.")
        elif field.discriminator is not None:
            for member in members:
                paths += _field_paths(member, f"{path}.")
        elif typing.get_origin(annotation) is dict and members:
            paths += [path, *_field_paths(members[0], f"{path}.<name>.")]
        else:
            paths.append(path)
    return paths


def _section(page: str, title: str) -> str:
    """The part of the page under `### title`, up to the next heading of that level or above."""
    return re.split(r"\n##?#? ", page.split(f"### {title}\n", 1)[1], maxsplit=1)[0]


def test_reference_covers_every_field_of_every_config_model():
    page = REFERENCE.read_text()
    missing = []
    for _, group in roots():
        for root in group:
            section = _section(page, root.title)
            for model, prefix in ((root.model, root.prefix), *root.more):
                dotted = f"{prefix}." if prefix else ""
                missing += [f"{root.title}: {path}" for path in _field_paths(model, dotted)
                            if f"| `{path}` |" not in section]
    assert not missing, f"the configuration reference lacks {missing}"


def test_reference_documents_every_algorithm_and_every_config_model():
    documented = documented_models()
    assert set(ALGORITHMS.values()) | set(EVOLVE_ALGORITHMS.values()) <= documented
    models = set()
    for module in pkgutil.iter_modules(lamarckian_hpc.config.__path__):
        loaded = importlib.import_module(f"lamarckian_hpc.config.{module.name}")
        models |= {value for value in vars(loaded).values() if isinstance(value, type) and issubclass(value, Section)
                   and value.__module__ == loaded.__name__}
    # a base that only holds shared fields (RootSection, _BatchAlgorithm) is documented through its subclasses
    left_out = [model.__name__ for model in models
                if not any(issubclass(known, model) for known in documented)]
    assert not left_out, f"config models missing from the reference: {left_out}"


def test_every_example_in_the_reference_loads_as_written():
    page = REFERENCE.read_text()
    failures, rows = [], 0
    for _, group in roots():
        for root in group:
            for line in _section(page, root.title).splitlines():
                if not line.startswith("| `") or "| derived |" in line:
                    continue
                cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
                rows += 1
                example = cells[-1].strip("` |")
                if not example or not validates(root, example):
                    failures.append(f"{cells[0]}: {example or '(none)'}")
    assert rows > 200
    assert not failures, f"examples that do not load: {failures}"


def test_benchmark_pages_show_the_latest_results():
    pytest.importorskip("pandas", reason="the benchmark tables are built with the analysis extra (pandas)")
    from lamarckian_hpc.analysis.benchmark_pages import referenced_results, results_names, update

    stale = update(check=True)
    assert not stale, f"out of date: {stale}; run python -m lamarckian_hpc.analysis.benchmark_pages"
    unshown = results_names() - referenced_results()
    assert not unshown, f"results entries no benchmark page shows: {sorted(unshown)}"


def _nav_pages(entries: list) -> list[str]:
    pages = []
    for entry in entries:
        for value in (entry.values() if isinstance(entry, dict) else [entry]):
            pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_every_page_is_in_the_navigation_and_every_entry_exists():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    listed = _nav_pages(config["nav"])
    pages = sorted(str(path.relative_to(DOCS)) for path in DOCS.rglob("*.md"))
    assert sorted(listed) == pages
    assert len(set(listed)) == len(listed)


def test_relative_links_between_pages_resolve():
    broken = []
    for page in DOCS.rglob("*.md"):
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target and not (page.parent / target).resolve().exists():
                broken.append(f"{page.relative_to(DOCS)} -> {target}")
    assert not broken, f"broken links: {broken}"


def test_the_site_builds_with_strict_checks(tmp_path):
    for module in ("mkdocs", "material"):
        pytest.importorskip(module, reason="building the site needs the docs extra (mkdocs, mkdocs-material)")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert result.returncode == 0, result.stderr[-3000:]


def test_every_reference_row_has_a_description():
    """A field without `Field(description=...)` would show an empty cell: describe it in its model."""
    rows = [line for line in (ROOT / "docs" / "reference" / "configuration.md").read_text().splitlines()
            if line.startswith("| `")]
    empty = [cells[0] for cells in ([cell.strip() for cell in row.strip().strip("|").split("|")] for row in rows)
             if not cells[-2]]
    assert rows and empty == []
