"""The game-balancing test of the paper's section V-B as an Evaluator: a lineup of K teams is the
decision vector, and three objectives, all to be maximised, say how imbalanced and how strong it is:

- f1, battle damage difference: the remaining strength (share of health left, averaged over its
  battles) of the lineup's strongest team minus that of its weakest, when all its teams play
  each other;
- f2, remaining-resources multiple: the economic resources the strongest team has left divided by
  those of the weakest (the weakest's floored at 1% of its full value, so that a wiped-out team
  gives a large but finite multiple); the paper calls a lineup with f2 > 2 imbalanced;
- f3, strength of the weakest team: its remaining strength in battles against every team of the
  baseline lineups in the rules file.

NSGA-II minimises, so `evaluate` returns (-f1, -f2, -f3); it searches lineups with the lineup
operators (`games.lineup.lineup_operators`, passed to `ec.NSGA2`). Every battle's seed is derived from the
two teams it pits, so an evaluation is a pure function of the genome, the same on any worker."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..ec.evaluator import Description
from .battle import Battle
from .data import GameData, load_game_data
from .lineup import LineupCoding
from .teams import TeamStats, compile_spec, compile_team

OBJECTIVE_NAMES = ("damage_difference", "resources_multiple", "weakest_strength")
IMBALANCE_THRESHOLD = 2.0  # a remaining-resources multiple above this is imbalanced (the paper's Fig. 11b)
RESOURCE_FLOOR = 0.01
MAX_MEMO_PAIRINGS = 200_000


@dataclass(frozen=True)
class LineupScore:
    teams: tuple[str, ...]  # hero+soldier+equipment per team
    strongest: int  # index into teams
    weakest: int
    damage_difference: float  # f1
    resources_multiple: float  # f2
    weakest_strength: float  # f3

    @property
    def objectives(self) -> np.ndarray:
        """Minimised: the three maximised objectives negated."""
        return -np.array([self.damage_difference, self.resources_multiple, self.weakest_strength])

    @property
    def imbalanced(self) -> bool:
        return self.resources_multiple > IMBALANCE_THRESHOLD


def _seed(first: TeamStats, second: TeamStats, round_index: int) -> int:
    return zlib.crc32(f"{first.label}|{second.label}|{round_index}".encode())


class BalanceProblem:
    """The Evaluator of the balancing test over the game in `data_folder` (default: built-in)."""

    name = "balance"
    num_objectives = 3

    def __init__(self, data_folder: str | Path | None = None, data: GameData | None = None) -> None:
        self.data = data if data is not None else load_game_data(data_folder)
        equipment_choices = np.array([len(hero.equipment) for hero in self.data.heroes])
        self.coding = LineupCoding(len(self.data.heroes), self.data.rules.lineup_size, len(self.data.soldiers),
                                   equipment_choices)
        self.baseline_teams = [compile_spec(self.data, team) for lineup in self.data.baselines for team in lineup.teams]
        self._teams: dict[tuple[int, int, int], TeamStats] = {}  # memo of compiled teams
        self._pairings: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}  # memo of battle outcomes

    def __getstate__(self) -> dict:
        """Pickled (shipped to Ray workers) without the memos, which each process refills."""
        return {**self.__dict__, "_teams": {}, "_pairings": {}}

    @property
    def num_variables(self) -> int:
        return self.coding.length

    def genome_names(self) -> list[str]:
        heroes = [hero.name for hero in self.data.heroes]
        return ([f"order_{slot}" for slot in range(len(heroes))] + [f"soldier_{name}" for name in heroes]
                + [f"equipment_{name}" for name in heroes])

    def describe(self) -> Description:
        return Description(self.name, self.coding.as_coding(), self.num_objectives)

    def initialize(self, rng: np.random.Generator, count: int) -> np.ndarray:
        return self.coding.sample(rng, count)

    def evaluate(self, genomes: np.ndarray) -> np.ndarray:
        return np.array([self.score(genome).objectives for genome in np.atleast_2d(genomes)])

    def team(self, hero: int, soldier: int, equipment: int) -> TeamStats:
        key = (hero, soldier, equipment)
        if key not in self._teams:
            self._teams[key] = compile_team(self.data, hero, soldier, equipment)
        return self._teams[key]

    def _battles(self, first: TeamStats, second: TeamStats) -> tuple[np.ndarray, np.ndarray]:
        """Mean remaining strength and resources of both sides over `battles_per_pair` battles. The
        seeds depend only on the two teams, so the outcome is memoised: a converging population
        fields the same pairings again and again."""
        key = (first.label, second.label)
        if key not in self._pairings:
            if len(self._pairings) >= MAX_MEMO_PAIRINGS:
                self._pairings.clear()
            self._pairings[key] = self._play(first, second)
        return self._pairings[key]

    def _play(self, first: TeamStats, second: TeamStats) -> tuple[np.ndarray, np.ndarray]:
        strength, resources = np.zeros(2), np.zeros(2)
        rounds = self.data.rules.battles_per_pair
        for round_index in range(rounds):
            result = Battle(first, second, self.data.rules, self.data.bugs, _seed(first, second, round_index)).run()
            strength += result.remaining_strength
            resources += result.remaining_resources
        return strength / rounds, resources / rounds

    def score(self, genome: np.ndarray) -> LineupScore:
        """The three objectives of one lineup, and which of its teams are strongest and weakest."""
        if not self.coding.valid(np.asarray(genome, float)[None, :])[0]:
            raise ValueError("not a valid lineup genome (a permutation of the heroes, then loadout indices)")
        teams = [self.team(*slot) for slot in self.coding.decode(genome)]
        k = len(teams)
        strength, resources = np.zeros(k), np.zeros(k)
        for i in range(k):
            for j in range(i + 1, k):
                pair_strength, pair_resources = self._battles(teams[i], teams[j])
                strength[[i, j]] += pair_strength
                resources[[i, j]] += pair_resources
        strength, resources = strength / (k - 1), resources / (k - 1)
        order = np.argsort(-strength, kind="stable")
        strongest, weakest = int(order[0]), int(order[-1])
        floor = RESOURCE_FLOOR * teams[weakest].resources
        multiple = resources[strongest] / max(resources[weakest], floor)
        against = [self._battles(teams[weakest], baseline)[0][0] for baseline in self.baseline_teams]
        return LineupScore(tuple(team.label for team in teams), strongest, weakest,
                           float(strength[strongest] - strength[weakest]), float(multiple),
                           float(np.mean(against)) if against else 0.0)
