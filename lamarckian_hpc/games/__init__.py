"""A built-in asynchronous strategy game (heroes leading squads, battles on an event queue) and
its two uses from the paper's section V: the game-balancing test (NSGA-II over lineups) and
automated game testing (an EvoRL search for planted bugs)."""

from .battle import ACTION_NAMES, NUM_ACTIONS, SYMPTOMS, Battle, BattleResult
from .data import BUG_NAMES, GameData, GameDataError, load_game_data
from .teams import TeamStats, compile_spec, compile_team

__all__ = ["ACTION_NAMES", "BUG_NAMES", "Battle", "BattleResult", "GameData", "GameDataError", "NUM_ACTIONS",
           "SYMPTOMS", "TeamStats", "compile_spec", "compile_team", "load_game_data"]
