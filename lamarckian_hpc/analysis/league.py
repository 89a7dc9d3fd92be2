"""League figures: the payoff matrix between members and each member's Elo over time, drawn from
a run's `/league` group (`lamarckian_hpc.league.store`). Runs without a league give no figure.

The group is read by name, so older or partial layouts still draw: the first dataset whose path
contains `payoff` ([C, C], or [time, C, C] of which the last slice is shown), the first containing
`elo` ([time, C] or [C]) with `history/update` as its x axis when present, and `member_names`.
The league declares C rows up front (SWMR cannot add datasets later); only the rows in use
(`members/count`, or the non-empty names) are shown. `league_analysis` is the topic that
`analysis/league.py` and `lamarckian-hpc report` both draw.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from .loader import LEAGUE_GROUP, Requirement, RunData
from .plotting import Analysis, FigureResult, new_figure, save

NEEDS = Requirement(f"/{LEAGUE_GROUP} group (members, payoff, Elo)",
                    "league runs (their LeagueRunWriter, lamarckian_hpc.league.store; see the league guide)",
                    lambda run: bool(run.league))


def _find(league: dict[str, np.ndarray], word: str) -> np.ndarray | None:
    return next((np.asarray(values) for path, values in sorted(league.items()) if word in path.lower()), None)


def _names(league: dict[str, np.ndarray]) -> list[str]:
    names = _find(league, "member")
    if names is None or names.ndim != 1:
        return []
    return [name.decode() if isinstance(name, bytes) else str(name) for name in names]


def members_in_use(league: dict[str, np.ndarray], capacity: int) -> int:
    """Rows of the league's fixed-capacity tables that hold members."""
    count = league.get("members/count")
    if count is not None and np.size(count):
        return min(int(np.ravel(count)[0]), capacity)
    names = _names(league)
    if names and any(names):
        return min(max(k for k, name in enumerate(names) if name) + 1, capacity)
    return capacity


def member_names(league: dict[str, np.ndarray], count: int) -> list[str]:
    names = _names(league)
    return [names[k] if k < len(names) and names[k] else str(k) for k in range(count)]


def payoff_data(run: RunData) -> pd.DataFrame:
    """The latest payoff matrix of the members in use, rows and columns named by member; empty
    without one."""
    payoff = _find(run.league, "payoff")
    if payoff is None or payoff.ndim not in (2, 3) or payoff.size == 0:
        return pd.DataFrame()
    matrix = payoff[-1] if payoff.ndim == 3 else payoff
    count = members_in_use(run.league, matrix.shape[0])
    if count == 0:
        return pd.DataFrame()
    names = member_names(run.league, count)
    matrix = np.array(matrix[:count, :count], dtype=float)
    games = run.league.get("results/games")
    if games is not None and np.shape(games) == np.shape(payoff[-1] if payoff.ndim == 3 else payoff):
        matrix[np.asarray(games)[:count, :count] == 0] = np.nan  # never played: no win rate to show
    return pd.DataFrame(matrix, index=names, columns=names)


def plot_payoff(run: RunData, out_path: Path) -> FigureResult | None:
    matrix = payoff_data(run)
    if matrix.empty:
        return None
    figure, (axis,) = new_figure(width=5.5, height=5.0)
    axis.set_facecolor("0.85")  # pairs that never played
    image = axis.imshow(matrix.to_numpy(float), cmap="RdBu", vmin=0.0, vmax=1.0)
    if len(matrix) <= 40:  # beyond that, names are unreadable
        axis.set_xticks(range(matrix.shape[1]), matrix.columns, rotation=90, fontsize="x-small")
        axis.set_yticks(range(matrix.shape[0]), matrix.index, fontsize="x-small")
    figure.colorbar(image, ax=axis, label="win rate of row against column")
    return save(figure, out_path, f"league payoff: {run.name}", matrix.reset_index(names="member"))


def elo_data(run: RunData) -> pd.DataFrame:
    """Long rows (update, member, elo) for the members in use; a member's rows start when it
    joined. Empty without Elo ratings."""
    elo = _find(run.league, "elo")
    if elo is None or elo.size == 0 or elo.ndim not in (1, 2):
        return pd.DataFrame(columns=["update", "member", "elo"])
    elo = elo[None, :] if elo.ndim == 1 else elo
    count = members_in_use(run.league, elo.shape[1])
    updates = run.league.get("history/update")
    x = np.asarray(updates) if updates is not None and len(updates) == len(elo) else np.arange(len(elo))
    frame = pd.DataFrame(elo[:, :count], columns=member_names(run.league, count)).assign(update=x)
    return frame.melt(id_vars="update", var_name="member", value_name="elo").dropna().reset_index(drop=True)


def plot_elo(run: RunData, out_path: Path) -> FigureResult | None:
    data = elo_data(run)
    if data.empty:
        return None
    figure, (axis,) = new_figure()
    for member, rows in data.groupby("member", sort=False):
        axis.plot(rows["update"], rows["elo"], label=str(member))
    axis.set_xlabel("league update")
    axis.set_ylabel("Elo")
    axis.grid(alpha=0.3)
    if data["member"].nunique() <= 12:
        axis.legend(fontsize="x-small")
    return save(figure, out_path, f"Elo over time: {run.name}", data)


def _role(code: float) -> str:
    """The role's name ("main agent", ...), from the league's own enum; "" for an unknown code."""
    from lamarckian_hpc.league import Role  # the league's config models, only when a league is read

    try:
        return Role(int(code)).name.lower().replace("_", " ")
    except ValueError:
        return ""


def league_table(runs: Sequence[RunData]) -> pd.DataFrame:
    """One row per member in use of each league run: its role, current Elo (`rating`), games
    played (discounted, as the league counts them) and mean win rate over the opponents it met."""
    rows = []
    for run in runs:
        payoff = payoff_data(run)
        if payoff.empty:
            continue
        count = len(payoff)
        roles = run.league.get("members/role")
        rating = run.league.get("rating")
        games = run.league.get("results/games")
        for k, name in enumerate(payoff.index):
            rows.append({"run": run.name, "member": name,
                         "role": _role(roles[k]) if roles is not None and k < len(roles) else "",
                         "elo": float(rating[k]) if rating is not None and k < len(rating) else np.nan,
                         "games": float(np.asarray(games)[k, :count].sum()) if games is not None else np.nan,
                         "mean_win_rate": float(np.nanmean(payoff.iloc[k])) if payoff.iloc[k].notna().any()
                         else np.nan})
    return pd.DataFrame(rows, columns=["run", "member", "role", "elo", "games", "mean_win_rate"])


def league_analysis(runs: Sequence[RunData], out_dir: Path) -> Analysis:
    """`payoff_<run>.png` and `elo_<run>.png` per league run; the table is league_table."""
    figures = []
    for run in runs:
        figures += [plot_payoff(run, Path(out_dir) / f"payoff_{run.name}.png"),
                    plot_elo(run, Path(out_dir) / f"elo_{run.name}.png")]
    return Analysis([figure for figure in figures if figure is not None], league_table(runs))
