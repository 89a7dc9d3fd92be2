"""League training after AlphaStar: main agents, main exploiters and league exploiters, frozen
snapshots on a schedule, opponents by prioritized fictitious self-play mixed with self-play, a
payoff matrix and Elo ratings of every member (kept in the run file under /league), and a
non-transitive matrix game on which the league's effect can be measured in seconds."""

from .league import League, LeagueEvent, Member, Role
from .payoff import PayoffMatrix, elo_expected, elo_update
from .pfsp import f_hard, f_var, pfsp_probabilities

__all__ = ["League", "LeagueEvent", "Member", "PayoffMatrix", "Role", "elo_expected", "elo_update", "f_hard",
           "f_var", "pfsp_probabilities"]
