"""A league run's payoff matrix between its members and their Elo over time (AlphaStar's league).

    python analysis/league.py RUN.h5 [RUN.h5 ...] --out DIR

Reads the run's /league group. payoff_<run>.png shows the latest win rate of each member (row)
against each other (column), grey where they never played; elo_<run>.png each member's Elo from
when it joined. league.csv, which it prints, has one row per member: role, current Elo, games
(discounted, as the league counts them) and mean win rate.
"""

from __future__ import annotations

import sys

from lamarckian_hpc.analysis.command import run_script, script_parser
from lamarckian_hpc.analysis.league import NEEDS, league_analysis


def main(argv: list[str] | None = None) -> int:
    args = script_parser(__doc__).parse_args(argv)
    return run_script("league", args.runs, args.out, NEEDS, lambda runs: league_analysis(runs, args.out))


if __name__ == "__main__":
    sys.exit(main())
