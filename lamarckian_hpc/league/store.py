"""The league in the run's HDF5 file, under `/league`.

SWMR forbids creating datasets once writing has started (see `storage/run_file.py`), and a league
grows during the run. So everything is declared up front with a fixed capacity C
(`league.capacity`), and a member's row is filled in when it joins:

- `/league/member_names`            (C,) bytes (up to 64), "" for rows not yet used
- `/league/members/role`            (C,) int8: 0 main agent, 1 main exploiter, 2 league exploiter, 3 snapshot
- `/league/members/parent`          (C,) int64: for a snapshot, the learner it was taken from; else -1
- `/league/members/created_update`  (C,) int64: league update count when it joined
- `/league/members/count`           (1,) int64: rows in use
- `/league/results/wins`, `draws`, `games`  (C, C) float64: discounted counts of row member against
  column member
- `/league/payoff`                  (C, C) float64: win rate (wins + draws / 2) / games of row
  against column, 0.5 for pairs that never played, NaN in rows and columns not yet used
- `/league/rating`                  (C,) float64: current Elo ratings
- `/league/history/update`          (n,) int64 and `/league/history/elo` (n, C) float64: one row
  per `write`, so Elo trajectories can be drawn; NaN for members not yet in the league
- `/league/matches/{update, learner, opponent, wins, draws, losses}`  (k,) int64: every match
  result a run recorded (the games a learner finished in one update against the opponent it was
  given), in order

The names are chosen so that `lamarckian_hpc.analysis` finds them by word (`member`, `payoff`,
`elo`): the names, the win-rate matrix and the Elo history are each the first match.

`LeagueRunWriter` is a `RunWriter` that creates this group in the same file: the group is made
as soon as the file is opened, before the writer switches to SWMR mode. `read_league` opens a
file with SWMR (also one still being written) and returns the last written state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from ..storage import RunWriter
from ..storage.run_file import FILE_LOCKING
from .league import League

GROUP = "league"
NAME_BYTES = 64
HISTORY_CHUNK = 64
MATCH_COLUMNS = ("update", "learner", "opponent", "wins", "draws", "losses")


def create_league_datasets(file: h5py.File, capacity: int) -> dict[str, h5py.Dataset]:
    group = file.create_group(GROUP)
    group.attrs["capacity"] = capacity
    square = (capacity, capacity)
    datasets = {
        "member_names": group.create_dataset("member_names", shape=(capacity,), dtype=f"S{NAME_BYTES}"),
        "members/role": group.create_dataset("members/role", data=np.full(capacity, -1, np.int8)),
        "members/parent": group.create_dataset("members/parent", data=np.full(capacity, -1, np.int64)),
        "members/created_update": group.create_dataset("members/created_update", data=np.zeros(capacity, np.int64)),
        "members/count": group.create_dataset("members/count", data=np.zeros(1, np.int64)),
        "results/wins": group.create_dataset("results/wins", data=np.zeros(square)),
        "results/draws": group.create_dataset("results/draws", data=np.zeros(square)),
        "results/games": group.create_dataset("results/games", data=np.zeros(square)),
        "payoff": group.create_dataset("payoff", data=np.full(square, np.nan)),
        "rating": group.create_dataset("rating", data=np.zeros(capacity)),
        "history/update": group.create_dataset("history/update", shape=(0,), maxshape=(None,),
                                               chunks=(HISTORY_CHUNK,), dtype=np.int64),
        "history/elo": group.create_dataset("history/elo", shape=(0, capacity), maxshape=(None, capacity),
                                            chunks=(HISTORY_CHUNK, capacity), dtype=np.float64),
    }
    for column in MATCH_COLUMNS:
        datasets[f"matches/{column}"] = group.create_dataset(f"matches/{column}", shape=(0,), maxshape=(None,),
                                                             chunks=(HISTORY_CHUNK,), dtype=np.int64)
    return datasets


def _append(dataset: h5py.Dataset, rows: np.ndarray) -> None:
    if len(rows):
        dataset.resize(dataset.shape[0] + len(rows), axis=0)
        dataset[-len(rows):] = rows


def write_league_state(datasets: dict[str, h5py.Dataset], league: League,
                       history: list[tuple[int, np.ndarray]] | None = None,
                       matches: np.ndarray | None = None) -> None:
    """Overwrite the member table, payoff and Elo, and append history rows: `history` (update,
    Elo row) pairs, or one row of the league as it is now; and `matches` rows [k, 6]
    (MATCH_COLUMNS)."""
    capacity = datasets["rating"].shape[0]
    if league.config.capacity != capacity:
        raise ValueError(f"league.capacity={league.config.capacity} but the run file was made for {capacity}")
    count = len(league.members)
    names = np.zeros(capacity, dtype=f"S{NAME_BYTES}")
    roles, parents = np.full(capacity, -1, np.int8), np.full(capacity, -1, np.int64)
    created = np.zeros(capacity, np.int64)
    for member in league.members:
        names[member.index] = member.name.encode()[:NAME_BYTES]
        roles[member.index], parents[member.index] = int(member.role), member.parent
        created[member.index] = member.created_update
    datasets["member_names"][:] = names
    datasets["members/role"][:] = roles
    datasets["members/parent"][:] = parents
    datasets["members/created_update"][:] = created
    datasets["members/count"][0] = count
    payoff = league.payoff
    datasets["results/wins"][:] = payoff.wins
    datasets["results/draws"][:] = payoff.draws
    datasets["results/games"][:] = payoff.games
    win_rates = np.full((capacity, capacity), np.nan)
    for member in range(count):
        win_rates[member, :count] = payoff.win_rate(member, np.arange(count))
    datasets["payoff"][:] = win_rates
    datasets["rating"][:] = league.elo
    if history is None:
        history = [(league.update_count, elo_row(league))]
    if history:
        _append(datasets["history/update"], np.array([update for update, _ in history], np.int64))
        _append(datasets["history/elo"], np.stack([row for _, row in history]))
    if matches is not None:
        for k, column in enumerate(MATCH_COLUMNS):
            _append(datasets[f"matches/{column}"], np.asarray(matches, np.int64).reshape(-1, len(MATCH_COLUMNS))[:, k])


def elo_row(league: League) -> np.ndarray:
    """The league's Elo ratings as a history row: NaN for rows not used yet."""
    row = np.full(league.config.capacity, np.nan)
    row[:len(league.members)] = league.elo[:len(league.members)]
    return row


class LeagueRunWriter(RunWriter):
    """A run file with a `/league` group of `league_capacity` members.

    `RunWriter.__init__` opens the file, lays out its groups and only then starts SWMR; the league
    group is created at the moment the file handle is stored (the `_file` setter below), which is
    before SWMR starts, so no dataset is ever created in SWMR mode."""

    def __init__(self, path: str | Path, config: Any, metric_names: Any, meta: Any = None, *,
                 league_capacity: int, **kwargs: Any) -> None:
        self.league_capacity = league_capacity
        self.league_datasets: dict[str, h5py.Dataset] | None = None
        super().__init__(path, config, metric_names, meta, **kwargs)
        if self.league_datasets is None:
            raise RuntimeError("the run file was laid out without its /league group")

    @property
    def _file(self) -> h5py.File | None:
        return self.__dict__.get("_league_file")

    @_file.setter
    def _file(self, file: h5py.File | None) -> None:
        if file is not None and self.__dict__.get("league_datasets") is None:
            self.league_datasets = create_league_datasets(file, self.league_capacity)
        self.__dict__["_league_file"] = file

    def write_league(self, league: League, history: list[tuple[int, np.ndarray]] | None = None,
                     matches: np.ndarray | None = None, flush: bool = True) -> None:
        """Write the league's current state (`write_league_state`) and flush it with the metrics."""
        if self.league_datasets is None or self._file is None:
            raise RuntimeError(f"run file {self.path} is closed")
        write_league_state(self.league_datasets, league, history, matches)
        if flush:
            self.flush()


@dataclass
class LeagueRecord:
    names: list[str]
    roles: np.ndarray
    parents: np.ndarray
    created_update: np.ndarray
    wins: np.ndarray  # [n, n]
    draws: np.ndarray
    games: np.ndarray
    elo: np.ndarray  # [n]
    history_update: np.ndarray
    history_elo: np.ndarray  # [rows, n]
    matches: dict[str, np.ndarray] = field(default_factory=dict)  # MATCH_COLUMNS, one entry per match

    def win_rates(self) -> np.ndarray:
        """[n, n] win rates of row against column, 0.5 where they never played."""
        scored = self.wins + 0.5 * self.draws
        return np.where(self.games > 0, scored / np.maximum(self.games, 1e-12), 0.5)


def read_league(path: str | Path) -> LeagueRecord:
    """The league as last written (works on a file still being written, or one left by a kill)."""
    with h5py.File(path, "r", libver="latest", swmr=True, locking=FILE_LOCKING) as file:
        if GROUP not in file:
            raise ValueError(f"{path} has no /{GROUP} group: it was not written by a league run")
        group = file[GROUP]
        for dataset in ("members/count", "history/update", "history/elo"):
            group[dataset].refresh()
        matches = {}
        if "matches" in group:
            for column in MATCH_COLUMNS:
                group[f"matches/{column}"].refresh()
            length = min(group[f"matches/{column}"].shape[0] for column in MATCH_COLUMNS)
            matches = {column: group[f"matches/{column}"][:length] for column in MATCH_COLUMNS}
        n = int(group["members/count"][0])
        rows = min(group["history/update"].shape[0], group["history/elo"].shape[0])
        return LeagueRecord(
            names=[name.decode() for name in group["member_names"][:n]],
            roles=group["members/role"][:n], parents=group["members/parent"][:n],
            created_update=group["members/created_update"][:n],
            wins=group["results/wins"][:n, :n], draws=group["results/draws"][:n, :n],
            games=group["results/games"][:n, :n], elo=group["rating"][:n],
            history_update=group["history/update"][:rows], history_elo=group["history/elo"][:rows, :n],
            matches=matches)
