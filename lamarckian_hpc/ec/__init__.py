"""Evolutionary computation as ask/tell over arrays: the Evaluator interface, the one interface of
the generational algorithms (AskTell), codings, populations with lineage, operators, ranking,
NSGA-II, the GA, the ES family and test problems."""

from .ask_tell import AskTell
from .coding import CODING_KINDS, Coding
from .evaluator import Description, Evaluator
from .ga import GA
from .indicators import hypervolume, inverted_generational_distance
from .nsga2 import NSGA2
from .openai_es import OpenAIES, centered_ranks
from .population import IdCounter, Individual, Population
from .problems import Problem, circle_cities, dtlz, dtlz2, onemax, rastrigin, sphere, tsp, zdt
from .ranking import crowding_distance, non_dominated_fronts, rank_and_crowding
from .variation import make_crossover, make_mutation

__all__ = ["AskTell", "CMAES", "CODING_KINDS", "Coding", "Description", "Evaluator", "GA", "IdCounter", "Individual", "NSGA2",
           "OpenAIES", "Population", "Problem", "centered_ranks", "circle_cities", "crowding_distance", "dtlz", "dtlz2",
           "hypervolume", "inverted_generational_distance", "make_crossover", "make_mutation", "non_dominated_fronts",
           "onemax", "rank_and_crowding", "rastrigin", "sphere", "tsp", "zdt"]


def __getattr__(name: str) -> object:
    """CMAES on first use only: `cma` pulls in scipy.stats, which every evaluation worker would
    otherwise import for nothing."""
    if name == "CMAES":
        from .cmaes import CMAES

        return CMAES
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
