"""How a league's main agents are measured against a player they never train against, in their
own two-player game: a uniformly random legal player (`mdp.RandomLegalPolicy`), seats
alternating game by game. The league's scripted evaluation (`algorithm.scripted_opponent:
random`), the tests and the learning figure of docs/benchmarks/learning.md call this one
function, so the number in the run file is the number in the figure.

The games run on the sampler as training does (`config.env`'s adapter, the learner's policy
acting through a `PolicyMapping`), so a legal-action mask is honoured the same way; the
environment's `illegal_actions` counter is returned to prove it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..config import EnvConfig
from ..mdp import ExperienceBuffer, Policy, RandomLegalPolicy, Sampler
from ..multiagent import PolicyMapping, alternating_seats_mapping
from ..runtime.multiagent_sampling import make_pettingzoo_mdp

PLAYER, RANDOM = "player", "random"


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


def play_against_random(policy: Policy, env: EnvConfig, seats: Sequence[str], games: int, seed: int) -> MatchRecord:
    """`games` games of `policy` against a uniformly random legal player on `env` (one environment),
    `policy` in `seats[0]` in the even games and in `seats[1]` in the odd ones."""
    mdp = make_pettingzoo_mdp(env)
    mdp.reset(seed=seed)
    random_player = RandomLegalPolicy(mdp.action_space(mdp.agent_ids()[0]), seed)
    experience = {PLAYER: ExperienceBuffer()}
    mapping = PolicyMapping(alternating_seats_mapping(seats, PLAYER, RANDOM), (PLAYER, RANDOM), (PLAYER,), experience)
    sampler = Sampler([mdp], mapping, {PLAYER: policy, RANDOM: random_player}, seed)
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
