"""How a league's main agents are measured against a player they never train against, in their
own two-player game: a uniformly random legal player (`mdp.RandomLegalPolicy`), seats
alternating game by game (`play_against` takes any other opponent, such as Connect Four's
win-or-block player here). The league's scripted evaluation (`algorithm.scripted_opponent:
random`), the tests and the learning figure of docs/benchmarks/learning.md call this one
function, so the number in the run file is the number in the figure.

The games run on the sampler as training does (`config.env`'s adapter, the learner's policy
acting through a `PolicyMapping`), so a legal-action mask is honoured the same way; the
environment's `illegal_actions` counter is returned to prove it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..config import EnvConfig
from ..mdp import ExperienceBuffer, Policy, PolicyOutput, RandomLegalPolicy, Sampler
from ..multiagent import PolicyMapping, alternating_seats_mapping
from ..runtime.actor.multiagent_sampling import make_pettingzoo_mdp

PLAYER, OPPONENT = "player", "opponent"


@dataclass(frozen=True)
class MatchRecord:
    """Games of a player against the random player, from the player's side."""

    wins: int
    draws: int
    losses: int
    illegal_actions: int  # moves outside the mask, by either side (0 when masks are honoured)

    @property
    def games(self) -> int:
        return self.wins + self.draws + self.losses

    @property
    def win_rate(self) -> float:
        return self.wins / self.games

    @property
    def score(self) -> float:
        """Mean result: +1 a win, 0 a draw, -1 a loss."""
        return (self.wins - self.losses) / self.games


class WinOrBlockConnectFour:
    """A scripted Connect Four player (the sampler's `Policy` protocol, on the adapter's rows of
    `connect_four_v3`: a 6x7x2 board, own pieces then the opponent's, then the 7 legal columns): it
    completes four of its own when it can, otherwise blocks the opponent's four, otherwise plays a
    uniformly random legal column. A stronger yardstick than the random player."""

    ROWS, COLUMNS = 6, 7

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    @classmethod
    def _fours(cls, pieces: np.ndarray, row: int, column: int) -> bool:
        """Whether a piece at (row, column) makes four in a line with `pieces` (6x7 booleans)."""
        for d_row, d_column in ((0, 1), (1, 0), (1, 1), (1, -1)):
            count = 1
            for sign in (1, -1):
                r, c = row + sign * d_row, column + sign * d_column
                while 0 <= r < cls.ROWS and 0 <= c < cls.COLUMNS and pieces[r, c]:
                    count, r, c = count + 1, r + sign * d_row, c + sign * d_column
            if count >= 4:
                return True
        return False

    def _choose(self, row: np.ndarray) -> int:
        board = row[: self.ROWS * self.COLUMNS * 2].reshape(self.ROWS, self.COLUMNS, 2) > 0.5
        legal = np.flatnonzero(row[-self.COLUMNS:] > 0.5)
        filled = board.any(axis=2)
        landing = {int(c): int(np.flatnonzero(~filled[:, c])[-1]) for c in legal}  # row 5 is the bottom
        for side in (0, 1):  # win, then block
            for column, r in landing.items():
                if self._fours(board[:, :, side], r, column):
                    return column
        return int(self.rng.choice(legal))

    def __call__(self, observations: np.ndarray) -> PolicyOutput:
        actions = np.array([self._choose(row) for row in observations.reshape(len(observations), -1)])
        return PolicyOutput(actions, np.zeros(len(actions), np.float32))


def play_against_random(policy: Policy, env: EnvConfig, seats: Sequence[str], games: int, seed: int) -> MatchRecord:
    """`games` games of `policy` against a uniformly random legal player on `env` (one environment),
    `policy` in `seats[0]` in the even games and in `seats[1]` in the odd ones."""
    mdp = make_pettingzoo_mdp(env)
    mdp.reset(seed=seed)
    opponent = RandomLegalPolicy(mdp.action_space(mdp.agent_ids()[0]), seed)
    mdp.close()
    return play_against(policy, opponent, env, seats, games, seed)


def play_against(policy: Policy, opponent: Policy, env: EnvConfig, seats: Sequence[str], games: int,
                 seed: int) -> MatchRecord:
    """`games` games of `policy` against `opponent` on `env` (one environment), `policy` in
    `seats[0]` in the even games and in `seats[1]` in the odd ones."""
    mdp = make_pettingzoo_mdp(env)
    experience = {PLAYER: ExperienceBuffer()}
    mapping = PolicyMapping(alternating_seats_mapping(seats, PLAYER, OPPONENT), (PLAYER, OPPONENT), (PLAYER,), experience)
    sampler = Sampler([mdp], mapping, {PLAYER: policy, OPPONENT: opponent}, seed)
    returns: list[float] = []
    try:
        while len(returns) < games:
            sampler.tick()
            returns += [result.episode_return for result in sampler.take_completed() if result.policy_id == PLAYER]
            if experience[PLAYER].num_steps > 10_000:  # nothing is trained on these steps
                experience[PLAYER].take()
        illegal = int(getattr(mdp, "illegal_actions", 0))
    finally:
        sampler.close()
    outcomes = np.sign(np.asarray(returns[:games]))
    return MatchRecord(int((outcomes > 0).sum()), int((outcomes == 0).sum()), int((outcomes < 0).sum()), illegal)
