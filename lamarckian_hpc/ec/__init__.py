"""Evolutionary computation as ask/tell over arrays: operators, ranking, NSGA-II, test problems."""

from .cmaes import CMAES
from .indicators import hypervolume, inverted_generational_distance
from .nsga2 import NSGA2
from .openai_es import OpenAIES, centered_ranks
from .problems import Problem, dtlz2, zdt
from .ranking import crowding_distance, non_dominated_fronts, rank_and_crowding

__all__ = ["CMAES", "NSGA2", "OpenAIES", "centered_ranks", "Problem", "crowding_distance", "dtlz2", "hypervolume", "inverted_generational_distance",
           "non_dominated_fronts", "rank_and_crowding", "zdt"]
