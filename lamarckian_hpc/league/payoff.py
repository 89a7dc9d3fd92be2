"""The league's payoff matrix and Elo ratings.

`PayoffMatrix` keeps, for every ordered pair of members, discounted counts of wins, draws and games
(AlphaStar's payoff with decay): before a new result between i and j is added, that pair's counts
are multiplied by `decay`, so the win rate of a learner that keeps changing follows its recent
games. The matrix is antisymmetric in the sense wins[i, j] = games[i, j] - draws[i, j] - wins[j, i]
and symmetric in games and draws. An unplayed pair has win rate 0.5: an unknown opponent is
neither preferred nor avoided by PFSP.
"""

from __future__ import annotations

import numpy as np


class PayoffMatrix:
    def __init__(self, capacity: int, decay: float = 1.0) -> None:
        if not 0 < decay <= 1:
            raise ValueError(f"decay must be in (0, 1], got {decay}")
        self.capacity, self.decay = capacity, decay
        self.wins = np.zeros((capacity, capacity))
        self.draws = np.zeros((capacity, capacity))
        self.games = np.zeros((capacity, capacity))

    def record_game(self, i: int, j: int, score: float) -> None:
        """One game of i against j: score 1 (i won), 0.5 (draw) or 0 (i lost)."""
        if score not in (0, 0.5, 1):
            raise ValueError(f"score must be 0, 0.5 or 1, got {score}")
        self.record_outcomes(i, j, float(score == 1), float(score == 0.5), float(score == 0))

    def record_outcomes(self, i: int, j: int | np.ndarray, wins: float | np.ndarray, draws: float | np.ndarray,
                        losses: float | np.ndarray) -> None:
        """Add games of i against j (one opponent, or an array of distinct opponents with one entry
        each): how many i won, drew and lost."""
        j = np.atleast_1d(np.asarray(j, dtype=np.int64))
        if np.any(j == i):
            raise ValueError(f"member {i} cannot play itself in the payoff matrix")
        wins, draws, losses = (np.broadcast_to(np.asarray(v, dtype=np.float64), j.shape) for v in (wins, draws, losses))
        for table in (self.wins, self.draws, self.games):
            table[i, j] *= self.decay
            table[j, i] *= self.decay
        games = wins + draws + losses
        self.wins[i, j] += wins
        self.wins[j, i] += losses
        self.draws[i, j] += draws
        self.draws[j, i] += draws
        self.games[i, j] += games
        self.games[j, i] += games

    def win_rate(self, i: int, opponents: np.ndarray | list[int]) -> np.ndarray:
        """(wins + draws / 2) / games of i against each opponent; 0.5 where they never played."""
        opponents = np.asarray(opponents, dtype=np.int64)
        games = self.games[i, opponents]
        scored = self.wins[i, opponents] + 0.5 * self.draws[i, opponents]
        return np.where(games > 0, scored / np.maximum(games, 1e-12), 0.5)

    def reset_member(self, i: int) -> None:
        """Forget i's results (an exploiter that restarts is a new player)."""
        for table in (self.wins, self.draws, self.games):
            table[i, :] = 0.0
            table[:, i] = 0.0


def elo_expected(rating_a: float | np.ndarray, rating_b: float | np.ndarray) -> float | np.ndarray:
    """Expected score of a against b."""
    return 1.0 / (1.0 + 10.0 ** ((rating_b - rating_a) / 400.0))


def elo_update(ratings: np.ndarray, i: int, j: int | np.ndarray, score: float | np.ndarray, k: float = 16.0) -> None:
    """One game (or the mean score of a batch) of i against j, or against several distinct
    opponents at once (each rated against i's rating before the batch); moves ratings in place."""
    j = np.asarray(j, dtype=np.int64)
    delta = k * (np.asarray(score, dtype=np.float64) - elo_expected(ratings[i], ratings[j]))
    ratings[i] += float(np.sum(delta))
    ratings[j] -= delta
