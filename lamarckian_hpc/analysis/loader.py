"""Run files as pandas DataFrames, for the report and for users' own analysis.

A run file may be complete, still growing (its writer appends under SWMR) or left behind by a
killed writer. `storage.open_run` reads all three; this module turns what it returns into tables
and keeps only complete rows: each metric is cut to the rows present in all four of its columns,
and the population to the rows present in every column, so a reader that catches a flush half-way
never sees a ragged table. It only reads; it never opens a file for writing.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pandas as pd

from lamarckian_hpc.storage import open_run
from lamarckian_hpc.storage.run_file import FILE_LOCKING

METRIC_COLUMNS = ("metric", "wall_time", "env_frames", "policy_version", "value")
LEAGUE_GROUP = "league"


class RunFileError(ValueError):
    """A path that is not a readable run file; the message is one line naming the path."""


class MissingDataError(RunFileError):
    """A readable run file without what a figure needs (a PPO run given to the league figures);
    the message is one line naming the file, what it lacks and which workload writes that."""


@dataclass(frozen=True)
class Requirement:
    """What a topic's figures need a run to hold, said so that the error for a run without it tells
    the user which group is missing and which workload writes it."""

    what: str  # e.g. "a /league group (members, payoff, Elo)"
    written_by: str  # e.g. "league runs (LeagueRunWriter)"
    holds: Callable[[RunData], bool]

    def check(self, run: RunData) -> None:
        """Raises MissingDataError when `run` lacks what the topic needs."""
        if not self.holds(run):
            raise MissingDataError(f"error: {run.path} has no {self.what}; it is written by {self.written_by}")


@dataclass
class RunData:
    """Everything a run file holds, as plain Python and DataFrames."""

    path: Path
    meta: dict[str, Any]
    config: dict[str, Any]
    closed_cleanly: bool
    metrics: pd.DataFrame  # long: one row per (metric, row) with METRIC_COLUMNS
    population: pd.DataFrame  # one row per evaluated individual; empty without a population
    genome_names: list[str] = field(default_factory=list)
    league: dict[str, np.ndarray] = field(default_factory=dict)  # datasets under /league, by path
    status: str = "completed"  # run_status() when the file was read
    #: Recorded episodes (/trajectories) by policy id: whole episodes only; {} when none are recorded.
    trajectories: dict[str, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.path.stem

    def metric(self, name: str) -> pd.DataFrame:
        """One metric's rows (wall_time, env_frames, policy_version, value); empty when absent."""
        rows = self.metrics[self.metrics["metric"] == name]
        return rows.drop(columns="metric").reset_index(drop=True)

    def has_metric(self, name: str) -> bool:
        return bool((self.metrics["metric"] == name).any())

    def metrics_wide(self) -> pd.DataFrame:
        """One row per (policy_version, env_frames), one column per metric, plus the latest
        wall_time of the row; metrics not written at that row are NaN."""
        if self.metrics.empty:
            return pd.DataFrame(columns=["policy_version", "env_frames", "wall_time"])
        keys = ["policy_version", "env_frames"]
        values = self.metrics.pivot_table(index=keys, columns="metric", values="value", aggfunc="last")
        wall_time = self.metrics.groupby(keys)["wall_time"].max()
        wide = values.join(wall_time).reset_index()
        wide.columns.name = None
        return wide

    def last_values(self) -> dict[str, float]:
        """Each metric's most recent value (metrics without rows are left out)."""
        if self.metrics.empty:
            return {}
        return {name: float(rows["value"].iloc[-1]) for name, rows in self.metrics.groupby("metric", sort=True)}

    def config_value(self, dotted: str, default: Any = None) -> Any:
        node: Any = self.config
        for key in dotted.split("."):
            if not isinstance(node, dict) or key not in node:
                return default
            node = node[key]
        return node


def run_status(closed_cleanly: bool, meta: dict[str, Any]) -> str:
    """completed; running (not closed, and its writer's process is alive on this host); or
    incomplete (killed or failed). A writer on another host that is not closed reads as incomplete."""
    if closed_cleanly:
        return "completed"
    pid, host = meta.get("pid"), meta.get("hostname")
    if isinstance(pid, int) and host == socket.gethostname() and _process_alive(pid):
        return "running"
    return "incomplete (killed or failed)"


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _metrics_frame(reader: Any) -> pd.DataFrame:
    frames = []
    for name, series in reader.metrics().items():
        if len(series):
            frames.append(pd.DataFrame({
                "metric": name, "wall_time": series.wall_time, "env_frames": series.env_frames,
                "policy_version": series.policy_version, "value": series.value,
            }))
    if not frames:
        return pd.DataFrame({column: pd.Series(dtype=dtype) for column, dtype in
                             zip(METRIC_COLUMNS, ("object", "float64", "int64", "int64", "float64"))})
    return pd.concat(frames, ignore_index=True)


def population_frame(columns: dict[str, np.ndarray], genome_names: list[str]) -> pd.DataFrame:
    """Flattens the population's 2-D columns: parent_0/parent_1, objective_k, and the genome's
    entries by name (a PBT run's hyperparameters) or as gene_k."""
    if not columns:
        return pd.DataFrame()
    table: dict[str, np.ndarray] = {}
    for name, values in columns.items():
        if values.ndim == 1:
            table[name] = values
            continue
        if name == "parent_ids":
            labels = [f"parent_{k}" for k in range(values.shape[1])]
        elif name == "objectives":
            labels = [f"objective_{k}" for k in range(values.shape[1])]
        elif name == "genome" and len(genome_names) == values.shape[1]:
            labels = list(genome_names)
        else:
            labels = [f"gene_{k}" for k in range(values.shape[1])]
        for k, label in enumerate(labels):
            table[label] = values[:, k]
    frame = pd.DataFrame(table)
    if "generation" in frame:
        frame = frame.sort_values(["generation", "id"], kind="stable").reset_index(drop=True)
    return frame


def read_league(path: Path) -> dict[str, np.ndarray]:
    """Every dataset under /league (members, payoff over time, Elo), by its path inside the group;
    {} when the run has no league."""
    datasets: dict[str, np.ndarray] = {}
    with h5py.File(path, "r", libver="latest", swmr=True, locking=FILE_LOCKING) as file:
        if LEAGUE_GROUP not in file:
            return datasets

        def collect(name: str, item: Any) -> None:
            if isinstance(item, h5py.Dataset):
                item.refresh()
                datasets[name] = item[()]

        file[LEAGUE_GROUP].visititems(collect)
    return datasets


def load_run(path: str | Path) -> RunData:
    """Reads a run file whether it is complete, still being written, or was left by a kill."""
    path = Path(path)
    if not path.exists():
        raise RunFileError(f"error: no such run file: {path}")
    if not path.is_file():
        raise RunFileError(f"error: {path} is not a file")
    try:
        with open_run(path) as reader:
            closed_cleanly = reader.closed_cleanly
            metrics = _metrics_frame(reader)
            genome_names = reader.genome_names()
            population = population_frame(reader.population(), genome_names)
            meta, config = reader.meta, reader.config
            trajectories = {policy: len(reader.episodes(policy)["episode"]) for policy in reader.trajectory_policies()}
        league = read_league(path)
    except (OSError, KeyError, ValueError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise RunFileError(f"error: {path} is not a readable run file: {reason}") from None
    return RunData(path=path, meta=meta, config=config, closed_cleanly=closed_cleanly, metrics=metrics,
                   population=population, genome_names=genome_names, league=league,
                   status=run_status(closed_cleanly, meta), trajectories=trajectories)


def find_run_files(directory: str | Path) -> list[Path]:
    """Every .h5 file under `directory`, sorted by path."""
    return sorted(path for path in Path(directory).rglob("*.h5") if path.is_file())
