"""What a balancing run tells the game's designers: the final population's non-dominated lineups,
those among them whose remaining-resources multiple exceeds 2 (imbalanced, as the paper flags
them), and for each the team that dominates it, which is what a designer weakens."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..ec.ranking import non_dominated_fronts
from .balance import BalanceProblem, LineupScore


@dataclass(frozen=True)
class BalanceSummary:
    front: list[LineupScore]  # the non-dominated lineups of the final population
    imbalanced: list[LineupScore]  # those with a resources multiple above 2, most imbalanced first
    heroes_to_weaken: list[tuple[str, int]]  # hero of the strongest team, and in how many imbalanced lineups

    def to_json_dict(self) -> dict:
        def row(score: LineupScore) -> dict:
            return {"teams": list(score.teams), "strongest": score.teams[score.strongest],
                    "weakest": score.teams[score.weakest], "damage_difference": score.damage_difference,
                    "resources_multiple": score.resources_multiple, "weakest_strength": score.weakest_strength}

        return {"front_size": len(self.front), "imbalanced": [row(score) for score in self.imbalanced],
                "heroes_to_weaken": [{"hero": hero, "lineups": count} for hero, count in self.heroes_to_weaken]}


def summarize(problem: BalanceProblem, genomes: np.ndarray, objectives: np.ndarray) -> BalanceSummary:
    """The summary of a final population (genomes [n, 3H], minimised objectives [n, 3])."""
    finite = np.isfinite(objectives).all(axis=1)
    genomes, objectives = genomes[finite], objectives[finite]
    if not len(genomes):
        return BalanceSummary([], [], [])
    first = non_dominated_fronts(objectives)[0]
    keys = problem.coding.keys(genomes[first])
    _, unique = np.unique(keys, axis=0, return_index=True)  # one row per distinct lineup
    front = [problem.score(genomes[first[index]]) for index in sorted(unique)]
    imbalanced = sorted((score for score in front if score.imbalanced), key=lambda s: -s.resources_multiple)
    strongest = Counter(score.teams[score.strongest].split("+")[0] for score in imbalanced)
    return BalanceSummary(front, imbalanced, strongest.most_common())


def print_summary(summary: BalanceSummary, console: object, limit: int = 15) -> None:
    """The imbalanced lineups as a table (rich console), the most imbalanced first."""
    from rich.table import Table

    table = Table("f2 multiple", "f1 damage", "f3 weakest", "strongest team (weaken)", "lineup heroes", title=f"imbalanced lineups: {len(summary.imbalanced)} of the {len(summary.front)} "
                                  f"non-dominated (resources multiple > 2)")
    for score in summary.imbalanced[:limit]:
        table.add_row(f"{score.resources_multiple:.2f}", f"{score.damage_difference:.2f}",
                      f"{score.weakest_strength:.2f}", score.teams[score.strongest],
                      " ".join(team.split("+")[0] for team in score.teams))
    console.print(table)  # type: ignore[attr-defined]
    if summary.heroes_to_weaken:
        shown = ", ".join(f"{hero} ({count})" for hero, count in summary.heroes_to_weaken[:8])
        console.print(f"heroes leading the strongest team of imbalanced lineups: {shown}",  # type: ignore
                      highlight=False)
