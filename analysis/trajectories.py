"""Recorded episodes: what each policy did, from the episodes a run recorded (/trajectories).

    python analysis/trajectories.py RUN.h5 [RUN.h5 ...] --out DIR [--policy P] [--episodes K [K ...]]
        [--member M] [--generation G] [--opponent O]

Runs record episodes with `storage.trajectories.every_episodes` > 0: train runs, and population
runs (PBT members, EMOGI policies, league learners), whose episodes are tagged with the member, the
generation and (league) the opponent; --member, --generation and --opponent keep only those
episodes. For each run and policy (or only --policy): episodes_<run>_<policy>.png, histograms of the recorded episodes'
returns and lengths; actions_<run>_<policy>.png, the actions chosen per range of policy versions
(discrete: each action's share of the steps; continuous: each dimension's mean and std); and
rewards_<run>_<policy>.png, the reward of every step of episodes K (the run's episode numbers;
default: the first, middle and last recorded) and the return so far. Writes a CSV beside each
figure and trajectories.csv (one row per run and policy: episodes, steps, returns, mean length,
versions covered; one row per member and opponent in a population run), which it also prints.
"""

from __future__ import annotations

import sys

from lamarckian_hpc.analysis.command import run_script, script_parser
from lamarckian_hpc.analysis.trajectories import NEEDS, EpisodeTags, policy_requirement, trajectory_analysis


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("--policy", metavar="P", help="draw only this policy's episodes (default: every policy)")
    parser.add_argument("--episodes", nargs="+", type=int, metavar="K",
                        help="episode numbers whose step rewards to draw (default: first, middle and last recorded)")
    parser.add_argument("--member", type=int, metavar="M", help="only the episodes of this member (its id)")
    parser.add_argument("--generation", type=int, metavar="G", help="only the episodes of this generation (interval)")
    parser.add_argument("--opponent", metavar="O", help="only the episodes against this opponent (a league's)")
    args = parser.parse_args(argv)
    needs = NEEDS if args.policy is None else policy_requirement(args.policy)
    tags = EpisodeTags(args.member, args.generation, args.opponent)
    return run_script("trajectories", args.runs, args.out, needs,
                      lambda runs: trajectory_analysis(runs, args.out, args.policy, args.episodes, tags))


if __name__ == "__main__":
    sys.exit(main())
