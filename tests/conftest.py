"""The record of skipped tests that CI's second pass runs, the switch that rewrites the golden
arrays (`--regenerate-golden`, see tests/test_golden.py), and how many pytest-xdist workers
`-n auto` (pyproject's addopts) starts.

CI first runs the README's test command in an environment with only the `test` extra, where the
tests of optional parts (Slurm cluster, MPI, football) skip. Every run keeps the node ids of its
skipped tests (and skipped modules) in pytest's cache; once the extras and services are
installed, `pytest --skipped-last-run` runs exactly those, so the suite is not run twice.

Tests marked `second_pass` (the longest runs, about 15 s or more on two cores: several learner
processes, a killed rank, a live sink on a distributed run, a resumed population) skip in the
README's command, which must stay within five minutes on two cores, and run in CI's second pass,
where LAMARCKIAN_HPC_SECOND_PASS=1 is set.
"""

from __future__ import annotations

import os

import pytest

SKIPPED_KEY = "lamarckian_hpc/skipped"
SECOND_PASS = "LAMARCKIAN_HPC_SECOND_PASS"
#: Most tests wait on processes of their own (a run's Ray, a command line, actors), so a worker per
#: core keeps the cores busy; past four, each worker's Rays and actors would crowd the rest.
MAX_WORKERS = 4


class SkipRecord:
    """Collects the skipped node ids of this run and keeps them in the cache at its end."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.skipped: set[str] = set()

    def _record(self, report: pytest.CollectReport | pytest.TestReport) -> None:
        if report.skipped and not hasattr(report, "wasxfail"):
            self.skipped.add(report.nodeid)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self._record(report)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._record(report)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(self.config, "workerinput"):
            return  # a pytest-xdist worker sees only its share; the controller gets every report
        cache = getattr(self.config, "cache", None)  # absent with -p no:cacheprovider
        if cache is not None and not self.config.getoption("collectonly"):
            cache.set(SKIPPED_KEY, sorted(self.skipped))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--skipped-last-run", action="store_true",
                     help="run only the tests (and modules) that skipped in the last run")
    parser.addoption("--regenerate-golden", action="store_true",
                     help="rewrite tests/golden/*.npz from the current code instead of comparing with them")


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: one worker per core this process may use, at most MAX_WORKERS."""
    return max(1, min(len(os.sched_getaffinity(0)), MAX_WORKERS))


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(SkipRecord(config), "lamarckian-skip-record")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get(SECOND_PASS, "") in ("", "0"):
        later = pytest.mark.skip(reason=f"a long run, left to CI's second pass ({SECOND_PASS}=1 runs it)")
        for item in items:
            if item.get_closest_marker("second_pass") is not None:
                item.add_marker(later)
    if not config.getoption("--skipped-last-run"):
        return
    cache = getattr(config, "cache", None)
    recorded = cache.get(SKIPPED_KEY, None) if cache is not None else None
    if recorded is None:
        raise pytest.UsageError("--skipped-last-run: no earlier run recorded its skipped tests here")
    keep = [item for item in items
            if any(item.nodeid == node or item.nodeid.startswith(f"{node}::") for node in recorded)]
    config.hook.pytest_deselected(items=[item for item in items if item not in keep])
    items[:] = keep
