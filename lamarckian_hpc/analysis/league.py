"""League figures: the payoff matrix between members and each member's Elo over time, drawn from
a run's `/league` group (members, payoff over time, Elo). Runs without a league give no figure.

The group's layout is read by name: a dataset whose path contains `payoff` ([n, n], or
[time, n, n] of which the last slice is shown), one containing `elo` ([time, n] or [n]), and an
optional `members` list of names."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .loader import RunData
from .plotting import FigureResult, new_figure, save


def _find(league: dict[str, np.ndarray], word: str) -> np.ndarray | None:
    return next((np.asarray(values) for path, values in sorted(league.items()) if word in path.lower()), None)


def member_names(league: dict[str, np.ndarray], count: int) -> list[str]:
    names = _find(league, "member")
    if names is not None and names.ndim == 1 and len(names) >= count:
        return [name.decode() if isinstance(name, bytes) else str(name) for name in names[:count]]
    return [str(k) for k in range(count)]


def payoff_data(run: RunData) -> pd.DataFrame:
    """The latest payoff matrix, rows and columns named by member; empty without one."""
    payoff = _find(run.league, "payoff")
    if payoff is None or payoff.ndim not in (2, 3) or payoff.size == 0:
        return pd.DataFrame()
    matrix = payoff[-1] if payoff.ndim == 3 else payoff
    names = member_names(run.league, matrix.shape[0])
    return pd.DataFrame(matrix, index=names, columns=member_names(run.league, matrix.shape[1]))


def plot_payoff(run: RunData, out_path: Path) -> FigureResult | None:
    matrix = payoff_data(run)
    if matrix.empty:
        return None
    figure, (axis,) = new_figure(width=5.5, height=5.0)
    image = axis.imshow(matrix.to_numpy(float), cmap="RdBu", vmin=0.0, vmax=1.0)
    axis.set_xticks(range(matrix.shape[1]), matrix.columns, rotation=90, fontsize="x-small")
    axis.set_yticks(range(matrix.shape[0]), matrix.index, fontsize="x-small")
    figure.colorbar(image, ax=axis, label="win rate of row against column")
    return save(figure, out_path, f"league payoff: {run.name}", matrix.reset_index(names="member"))


def elo_data(run: RunData) -> pd.DataFrame:
    """Long rows (step, member, elo); empty without Elo ratings."""
    elo = _find(run.league, "elo")
    if elo is None or elo.size == 0 or elo.ndim not in (1, 2):
        return pd.DataFrame(columns=["step", "member", "elo"])
    elo = elo[None, :] if elo.ndim == 1 else elo
    names = member_names(run.league, elo.shape[1])
    frame = pd.DataFrame(elo, columns=names).rename_axis("step").reset_index()
    return frame.melt(id_vars="step", var_name="member", value_name="elo").dropna()


def plot_elo(run: RunData, out_path: Path) -> FigureResult | None:
    data = elo_data(run)
    if data.empty:
        return None
    figure, (axis,) = new_figure()
    for member, rows in data.groupby("member", sort=False):
        axis.plot(rows["step"], rows["elo"], label=str(member))
    axis.set_xlabel("league step")
    axis.set_ylabel("Elo")
    axis.grid(alpha=0.3)
    if data["member"].nunique() <= 12:
        axis.legend(fontsize="x-small")
    return save(figure, out_path, f"Elo over time: {run.name}", data)
