"""Pareto fronts of multi-objective runs (NSGA-II, EMOGI; the paper's Figs. 10 and 11b): the front
of the whole history, the front each generation had reached, and its hypervolume per generation.
`pareto_analysis` is the topic that `analysis/pareto.py` and `lamarckian-hpc report` both draw.

Objectives are stored minimised (maximised ones negated) and shown as stored. The front "reached
by generation g" is the non-dominated set of every individual evaluated up to g: what an elitist
run holds by then. Its hypervolume is pymoo's, against one reference point per run: the one given,
or else the worst value of each objective in the run's history plus a tenth of its range, so that
every individual counts. A run's own `hypervolume` metric (NSGA-II's, of its population after
selection, against the problem's reference) is shown beside it when the run wrote one.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from pymoo.indicators.hv import HV
from pymoo.util.nds.non_dominated_sorting import NonDominatedSorting

from .loader import Requirement, RunData
from .plotting import Analysis, FigureResult, new_figure, save


def objective_columns(population: pd.DataFrame) -> list[str]:
    return [column for column in population.columns if column.startswith("objective_")]


def is_multi_objective(run: RunData) -> bool:
    return len(objective_columns(run.population)) >= 2


HYPERVOLUME_COLUMNS = ["run", "generation", "front_size", "hypervolume", "reference", "recorded_hypervolume"]
NEEDS = Requirement("/population with two objectives or more", "multi-objective evolve runs (NSGA-II, EMOGI)",
                    is_multi_objective)


def _finite(run: RunData) -> pd.DataFrame:
    """The individuals whose every objective is finite (failed evaluations are stored as inf)."""
    population = run.population
    columns = objective_columns(population)
    return population[np.isfinite(population[columns]).all(axis=1)].reset_index(drop=True)


def _non_dominated(objectives: np.ndarray) -> np.ndarray:
    return np.asarray(NonDominatedSorting().do(objectives, only_non_dominated_front=True), dtype=int)


def pareto_data(run: RunData) -> pd.DataFrame:
    """Every evaluated individual with finite objectives, with `role`: `front` for the
    non-dominated set of all of them (what an elitist run ends with), `last generation` for the
    rest of the last generation, `earlier` for the others."""
    if not is_multi_objective(run):
        return pd.DataFrame()
    finite = _finite(run)
    if finite.empty:
        return finite.assign(role=pd.Series(dtype=object))
    role = np.where(finite["generation"] == finite["generation"].max(), "last generation", "earlier").astype(object)
    role[_non_dominated(finite[objective_columns(finite)].to_numpy())] = "front"
    return finite.assign(role=role)


def plot_pareto_fronts(runs: Sequence[RunData], out_path: Path) -> FigureResult | None:
    """First two objectives of each multi-objective run: earlier individuals faint, the last
    generation and the non-dominated front on top. None when no run has two objectives."""
    datasets = [(run, pareto_data(run)) for run in runs if is_multi_objective(run)]
    datasets = [(run, data) for run, data in datasets if not data.empty]
    if not datasets:
        return None
    figure, axes = new_figure(columns=len(datasets), width=5.0)
    for axis, (run, data) in zip(axes, datasets):
        earlier = data[data["role"] == "earlier"]
        last = data[data["role"] == "last generation"]
        front = data[data["role"] == "front"].sort_values("objective_0")
        axis.scatter(earlier["objective_0"], earlier["objective_1"], s=4, color="0.8", label="earlier generations")
        axis.scatter(last["objective_0"], last["objective_1"], s=10, color="tab:blue", label="last generation")
        axis.plot(front["objective_0"], front["objective_1"], "o-", color="tab:red", markersize=4,
                  label=f"front ({len(front)})")
        axis.set_xlabel("objective 0 (minimised)")
        axis.set_ylabel("objective 1 (minimised)")
        axis.set_title(run.name, fontsize="small")
        axis.grid(alpha=0.3)
        axis.legend(fontsize="x-small")
    data = pd.concat([data.assign(run=run.name) for run, data in datasets], ignore_index=True)
    return save(figure, out_path, "Pareto fronts", data)


def default_reference(run: RunData) -> np.ndarray:
    """The worst value of each objective over the run's history plus a tenth of its range (a
    tenth of its size, or 0.1, where every individual has the same value)."""
    objectives = _finite(run)[objective_columns(run.population)].to_numpy(float)
    worst, best = objectives.max(axis=0), objectives.min(axis=0)
    spread = np.where(worst > best, worst - best, np.maximum(np.abs(worst), 1.0))
    return worst + 0.1 * spread


def fronts_by_generation(run: RunData) -> pd.DataFrame:
    """Rows (generation, id, objective_k...) of the front reached by each generation: the
    non-dominated set of every individual evaluated up to it, built one generation at a time."""
    finite = _finite(run)
    columns = objective_columns(finite)
    if finite.empty or len(columns) < 2:
        return pd.DataFrame(columns=["generation", "id", *columns])
    fronts, front = [], finite.iloc[0:0]
    for generation, rows in finite.groupby("generation", sort=True):
        candidates = pd.concat([front, rows], ignore_index=True)
        front = candidates.iloc[_non_dominated(candidates[columns].to_numpy(float))]
        front = front.drop_duplicates(["id", *columns]).sort_values(columns[0], kind="stable")
        fronts.append(front[["id", *columns]].assign(generation=int(generation)))
    return pd.concat(fronts, ignore_index=True)[["generation", "id", *columns]]


def hypervolume_by_generation(run: RunData, reference: Sequence[float] | None = None) -> pd.DataFrame:
    """Rows (run, generation, front_size, hypervolume, reference, recorded_hypervolume): the
    hypervolume of each generation's front (fronts_by_generation) against `reference` (default:
    default_reference), and the run's own `hypervolume` metric of that generation (NaN without)."""
    fronts = fronts_by_generation(run)
    columns = objective_columns(fronts)
    if fronts.empty:
        return pd.DataFrame(columns=HYPERVOLUME_COLUMNS)
    point = np.asarray(reference if reference is not None else default_reference(run), dtype=float)
    if point.shape != (len(columns),):
        raise ValueError(f"the reference point has {point.size} values; {run.name} has {len(columns)} objectives")
    indicator = HV(ref_point=point)
    recorded = run.metric("hypervolume").set_index("policy_version")["value"] if run.has_metric("hypervolume") \
        else pd.Series(dtype=float)
    rows = []
    for generation, front in fronts.groupby("generation", sort=True):
        rows.append({"run": run.name, "generation": int(generation), "front_size": len(front),
                     "hypervolume": float(indicator(front[columns].to_numpy(float))),
                     "reference": " ".join(f"{value:.6g}" for value in point),
                     "recorded_hypervolume": float(recorded.get(generation, np.nan))})
    return pd.DataFrame(rows)


def plot_fronts_by_generation(run: RunData, out_path: Path, max_fronts: int = 12) -> FigureResult | None:
    """The front reached by each generation as a step line coloured by generation (at most
    `max_fronts` generations, evenly spaced, always the last), on the first two objectives."""
    fronts = fronts_by_generation(run)
    if fronts.empty:
        return None
    generations = np.array(sorted(fronts["generation"].unique()))
    shown = generations[np.unique(np.linspace(0, len(generations) - 1, min(max_fronts, len(generations))).round()
                                  .astype(int))]
    figure, (axis,) = new_figure(width=6.5)
    colours = ScalarMappable(Normalize(generations.min(), max(generations.max(), generations.min() + 1)), "viridis")
    figure.colorbar(colours, ax=axis, label="generation")
    for generation in shown:
        front = fronts[fronts["generation"] == generation].sort_values("objective_0")
        axis.step(front["objective_0"], front["objective_1"], "o-", where="post", markersize=3, linewidth=1,
                  color=colours.to_rgba(generation))
    axis.set_xlabel("objective 0 (minimised)")
    axis.set_ylabel("objective 1 (minimised)")
    axis.grid(alpha=0.3)
    return save(figure, out_path, f"front reached by each generation: {run.name}",
                fronts[fronts["generation"].isin(shown)])


def plot_hypervolume(data: pd.DataFrame, out_path: Path) -> FigureResult | None:
    """One panel per run (each has its own reference point): the hypervolume of the front reached
    by each generation, and the run's own metric dotted where it wrote one."""
    if data.empty:
        return None
    names = list(dict.fromkeys(data["run"]))
    figure, axes = new_figure(columns=len(names), width=5.0)
    for axis, name in zip(axes, names):
        rows = data[data["run"] == name]
        axis.plot(rows["generation"], rows["hypervolume"], marker=".", label="front reached")
        if rows["recorded_hypervolume"].notna().any():
            axis.plot(rows["generation"], rows["recorded_hypervolume"], ":", label="run's own metric")
        axis.set_title(f"{name} (reference {rows['reference'].iloc[0]})", fontsize="small")
        axis.set_xlabel("generation")
        axis.set_ylabel("hypervolume")
        axis.grid(alpha=0.3)
        axis.legend(fontsize="small")
    return save(figure, out_path, "hypervolume against generation", data)


def pareto_analysis(runs: Sequence[RunData], out_dir: Path, reference: Sequence[float] | None = None) -> Analysis:
    """`pareto_fronts.png` (every run's history and final front), `pareto_by_generation_<run>.png`
    per run and `hypervolume.png`; the table has one row per run (its last generation's front)."""
    out_dir = Path(out_dir)
    multi = [run for run in runs if is_multi_objective(run)]
    figures = [plot_pareto_fronts(multi, out_dir / "pareto_fronts.png")]
    figures += [plot_fronts_by_generation(run, out_dir / f"pareto_by_generation_{run.name}.png") for run in multi]
    volumes = [frame for frame in (hypervolume_by_generation(run, reference) for run in multi) if not frame.empty]
    data = pd.concat(volumes, ignore_index=True) if volumes else pd.DataFrame(columns=HYPERVOLUME_COLUMNS)
    figures.append(plot_hypervolume(data, out_dir / "hypervolume.png"))
    individuals = {run.name: len(_finite(run)) for run in multi}
    table = data.groupby("run", sort=False).tail(1).reset_index(drop=True)
    table.insert(2, "individuals", [individuals[name] for name in table["run"]])
    return Analysis([figure for figure in figures if figure is not None], table)
