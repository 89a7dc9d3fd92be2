"""Family trees of a run's population history: who descended from whom in NSGA-II, the GA and
EMOGI (offspring and their two parents), and in PBT (a member that exploited another starts a new
line from it), with PBT's hyperparameters over time. `lineage_analysis` is the topic that
`analysis/lineage.py` and `lamarckian-hpc report` both draw.

Parents outside the history (ids < 0, or never evaluated) are left out; a PBT row that names
itself as parent continues its member's line and is not a birth.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.collections import LineCollection

from .loader import Requirement, RunData
from .plotting import Analysis, FigureResult, new_figure, save

NEEDS = Requirement("/population (generation, id, parent_ids)", "evolve runs (NSGA-II, GA, PBT, EMOGI)",
                    lambda run: not run.population.empty and "generation" in run.population)


def is_pbt(run: RunData) -> bool:
    return run.config_value("algorithm.name") == "pbt" and not run.population.empty


def _positions(population: pd.DataFrame) -> pd.Series:
    """Each row's place within its generation, best first objective at 0 (the lineage's y axis)."""
    key = population["objective_0"] if "objective_0" in population else population["id"]
    return key.groupby(population["generation"]).rank(method="first", na_option="bottom").astype(int) - 1


def lineage_edges(run: RunData) -> pd.DataFrame:
    """(parent_id, child_id, generations, positions) for every recorded parent that is itself in
    the history; parents outside it (ids < 0, or never evaluated) are left out. A position is the
    individual's rank by first objective within the generation where it was first evaluated."""
    population = run.population
    columns = ["parent_id", "child_id", "parent_generation", "child_generation", "parent_position", "child_position"]
    parents = [column for column in population.columns if column.startswith("parent_")]
    if population.empty or not parents:
        return pd.DataFrame(columns=columns)
    positioned = population.assign(position=_positions(population))
    first = positioned.sort_values("generation", kind="stable").drop_duplicates("id").set_index("id")
    edges = []
    for column in parents:
        linked = positioned[positioned[column].isin(first.index) & (positioned[column] >= 0)]
        edges.append(pd.DataFrame({
            "parent_id": linked[column].to_numpy(), "child_id": linked["id"].to_numpy(),
            "parent_generation": first.loc[linked[column], "generation"].to_numpy(),
            "child_generation": linked["generation"].to_numpy(),
            "parent_position": first.loc[linked[column], "position"].to_numpy(),
            "child_position": linked["position"].to_numpy()}))
    edges_frame = pd.concat(edges, ignore_index=True)
    # PBT keeps a member's id across intervals: a row that names itself as parent is not a birth.
    return edges_frame[edges_frame["parent_id"] != edges_frame["child_id"]].reset_index(drop=True)[columns]


def plot_lineage(run: RunData, out_path: Path) -> FigureResult | None:
    """Each generation a column of individuals (best first objective at the bottom), each joined
    to its parents; colour is the first objective."""
    population = run.population
    if population.empty or "generation" not in population:
        return None
    edges = lineage_edges(run)
    figure, (axis,) = new_figure(width=7.0, height=4.5)
    segments = np.stack([edges[["parent_generation", "parent_position"]].to_numpy(float),
                         edges[["child_generation", "child_position"]].to_numpy(float)], axis=1) if len(edges) else []
    axis.add_collection(LineCollection(segments, colors="0.5", linewidths=0.5, alpha=0.4))
    colour = population["objective_0"].replace([np.inf, -np.inf], np.nan) if "objective_0" in population else None
    points = axis.scatter(population["generation"], _positions(population), c=colour, s=8, cmap="viridis")
    if colour is not None:
        figure.colorbar(points, ax=axis, label="objective 0 (minimised)")
    axis.set_xlabel("generation (PBT: interval)")
    axis.set_ylabel("rank within generation by objective 0")
    axis.autoscale()
    return save(figure, out_path, f"lineage: {run.name} ({len(edges)} parent links)", edges)


def hyperparameter_data(run: RunData) -> pd.DataFrame:
    """A PBT run's named genome entries per member and interval (generation, id, wall_time, name, value)."""
    names = [name for name in run.genome_names if name in run.population.columns]
    if not names:
        return pd.DataFrame(columns=["generation", "id", "wall_time", "hyperparameter", "value"])
    keep = [column for column in ("generation", "id", "wall_time") if column in run.population]
    return run.population[keep + names].melt(id_vars=keep, var_name="hyperparameter", value_name="value")


def plot_hyperparameters(run: RunData, out_path: Path) -> FigureResult | None:
    """One panel per hyperparameter: each member's value at each interval, and a dashed link from
    a parent's value to its child's first (an exploit step). Log scale where the config searches
    the hyperparameter on a log scale, or where its values span more than two decades."""
    data = hyperparameter_data(run)
    if data.empty:
        return None
    names = list(dict.fromkeys(data["hyperparameter"]))
    edges = lineage_edges(run)
    figure, axes = new_figure(columns=len(names), width=4.0)
    for axis, name in zip(axes, names):
        rows = data[data["hyperparameter"] == name]
        first_value = rows.sort_values("generation").drop_duplicates("id").set_index("id")["value"]
        for edge in edges.itertuples():
            parent_rows = rows[(rows["id"] == edge.parent_id) & (rows["generation"] < edge.child_generation)]
            if len(parent_rows) and edge.child_id in first_value.index:
                axis.plot([parent_rows["generation"].iloc[-1], edge.child_generation],
                          [parent_rows["value"].iloc[-1], first_value[edge.child_id]], ":", color="0.5", linewidth=0.8)
        for _, member_rows in rows.groupby("id"):
            axis.plot(member_rows["generation"], member_rows["value"], marker=".", linewidth=0.8)
        values = rows["value"].to_numpy(float)
        log_config = run.config_value(f"algorithm.hyperparameters.{name}.log")
        if (values > 0).all() and (log_config is True or (log_config is None and values.max() / values.min() > 100)):
            axis.set_yscale("log")
        axis.set_xlabel("interval")
        axis.set_title(name, fontsize="small")
        axis.grid(alpha=0.3)
    return save(figure, out_path, f"hyperparameters over time: {run.name}", data)


def founders(run: RunData) -> set[int]:
    """Ids of the first-generation individuals that the last generation descends from (through
    any chain of recorded parents): how many of the initial lines survived."""
    population = run.population
    if population.empty:
        return set()
    edges = lineage_edges(run)
    parents: dict[int, set[int]] = {}
    for edge in edges.itertuples():
        parents.setdefault(int(edge.child_id), set()).add(int(edge.parent_id))
    first_generation = set(population.loc[population["generation"] == population["generation"].min(), "id"])
    seen: set[int] = set()
    frontier = {int(identifier) for identifier in
                population.loc[population["generation"] == population["generation"].max(), "id"]}
    while frontier:
        seen |= frontier
        frontier = {parent for child in frontier for parent in parents.get(child, ())} - seen
    return {int(identifier) for identifier in seen if identifier in first_generation}


def lineage_table(runs: Sequence[RunData]) -> pd.DataFrame:
    """One row per run with a population: individuals, generations, parent links (births), the
    first generation's size and how many of its lines the last generation descends from."""
    rows = []
    for run in runs:
        population = run.population
        if population.empty or "generation" not in population:
            continue
        first = population["generation"] == population["generation"].min()
        rows.append({"run": run.name, "algorithm": run.config_value("algorithm.name", ""),
                     "individuals": len(population), "generations": int(population["generation"].nunique()),
                     "parent_links": len(lineage_edges(run)), "first_generation": int(first.sum()),
                     "surviving_lines": len(founders(run))})
    return pd.DataFrame(rows, columns=["run", "algorithm", "individuals", "generations", "parent_links",
                                       "first_generation", "surviving_lines"])


def lineage_analysis(runs: Sequence[RunData], out_dir: Path) -> Analysis:
    """`lineage_<run>.png` per run with a population (its data: the parent links), and for PBT runs
    `hyperparameters_<run>.png`; the table is lineage_table."""
    figures: list[FigureResult | None] = []
    for run in runs:
        figures.append(plot_lineage(run, Path(out_dir) / f"lineage_{run.name}.png"))
        if is_pbt(run):
            figures.append(plot_hyperparameters(run, Path(out_dir) / f"hyperparameters_{run.name}.png"))
    return Analysis([figure for figure in figures if figure is not None], lineage_table(runs))
