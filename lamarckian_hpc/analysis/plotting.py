"""Shared figure plumbing: matplotlib `Figure` objects drawn without pyplot, so no GUI backend or
global figure state is involved (it works on a login node without a display, and in threads), and
a user's own pyplot backend (a notebook's, say) is left as it is.

Every figure function returns a `FigureResult` with the data it plotted, so a test or a user can
check a figure against the file it came from without reading pixels. A topic (learning curves,
staleness, scaling, Pareto fronts, lineage, league) returns an `Analysis`: its figures and one
summary table, which an `analysis/NAME.py` script writes as PNG and CSV and prints, and which
`lamarckian-hpc report` puts in one section, so the two never draw a figure in two ways.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

DPI = 110


@dataclass(frozen=True)
class FigureResult:
    """A PNG written to `path`, what it shows (`title`) and the rows it plotted (`data`)."""

    path: Path
    title: str
    data: pd.DataFrame


@dataclass(frozen=True)
class Analysis:
    """One topic's output: its figures (each with the rows it plotted) and a summary table with one
    row per run (or per member, per core count) that a script prints and the report shows."""

    figures: list[FigureResult]
    table: pd.DataFrame


def new_figure(columns: int = 1, rows: int = 1, width: float = 6.0, height: float = 4.0) -> tuple[Figure, list]:
    figure = Figure(figsize=(width * columns, height * rows), layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False)
    return figure, [axis for row in axes for axis in row]


def save(figure: Figure, path: Path, title: str, data: pd.DataFrame) -> FigureResult:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.suptitle(title)
    figure.savefig(path, dpi=DPI)
    return FigureResult(path=path, title=title, data=data.reset_index(drop=True))
