"""EMOGI's behaviour terms: the reward a genome trains with, and the objectives a policy scores.

After the paper (Section V-A), a Pong agent is judged on two objectives that share the game result
and disagree about movement:

    f1 = score + lambda * activeness        f2 = score + lambda * (1 - activeness)

`score` is the normalized score (own - enemy + max) / (2 max) in [0, 1], averaged over episodes,
with max the points needed to win; `activeness` is the share of an episode's steps in which the
agent moved (move(a) = 1/T per moving step, summed over the T steps of the episode), averaged over
episodes. Both are maximised; the evolution driver minimises, so `objectives` returns -f1, -f2.

The genome is the pair of reward weights (w_active, w_lazy): every step the agent moves earns
w_active / T_ref and every step it stays earns w_lazy / T_ref on top of the +1/-1 per point, with
T_ref = `reward_horizon_steps`. NSGA-II searches these weights, and the front it keeps spans from
agents that move all the time to agents that move only when they must.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

#: Names of the genome's entries, as the run file's population records them.
GENOME_NAMES = ("activeness_reward_weight", "laziness_reward_weight")
#: Names of the behaviour measures kept for every policy.
BEHAVIOUR_NAMES = ("normalized_score", "activeness", "win_rate", "point_difference")


@dataclass(frozen=True)
class EpisodeTrace:
    """What the objectives need from one episode: per step, whether the agent moved and the point
    scored (+1 for the agent, -1 for the opponent, 0 otherwise)."""

    moved: np.ndarray  # [T] bool
    points: np.ndarray  # [T] int


@dataclass(frozen=True)
class Behaviour:
    normalized_score: float
    activeness: float
    win_rate: float  # share of episodes the agent won (reached more points than the opponent)
    point_difference: float  # mean of own minus enemy points per episode

    def as_row(self) -> np.ndarray:
        return np.array([getattr(self, name) for name in BEHAVIOUR_NAMES], dtype=np.float64)

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def reward_terms(genome: np.ndarray, horizon_steps: int) -> dict[str, float]:
    """The env kwargs that put a genome's behaviour weights into every step's reward."""
    active, lazy = float(genome[0]), float(genome[1])
    return {"move_reward": active / horizon_steps, "stay_reward": lazy / horizon_steps}


def behaviour_of(episodes: Sequence[EpisodeTrace], points_to_win: int) -> Behaviour:
    """The behaviour measures of a policy from the episodes it played."""
    if not episodes:
        raise ValueError("behaviour needs at least one episode")
    scores, active, wins, differences = [], [], [], []
    for episode in episodes:
        own = int(np.sum(episode.points > 0))
        enemy = int(np.sum(episode.points < 0))
        scores.append((own - enemy + points_to_win) / (2.0 * points_to_win))
        active.append(float(np.mean(episode.moved)) if len(episode.moved) else 0.0)
        wins.append(float(own > enemy))
        differences.append(float(own - enemy))
    return Behaviour(float(np.mean(scores)), float(np.mean(active)), float(np.mean(wins)), float(np.mean(differences)))


def objectives(behaviour: Behaviour, activeness_weight: float = 1.0) -> np.ndarray:
    """[-f1, -f2] (minimised): f1 rewards winning and moving, f2 winning and staying still."""
    score, activeness = behaviour.normalized_score, behaviour.activeness
    return -np.array([score + activeness_weight * activeness, score + activeness_weight * (1.0 - activeness)])
