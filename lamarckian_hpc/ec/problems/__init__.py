"""Test problems as Evaluators: ZDT and DTLZ (multi-objective), sphere, Rastrigin, OneMax and a
travelling salesman (single-objective)."""

from .dtlz import dtlz, dtlz2
from .problem import Problem
from .single_objective import circle_cities, onemax, rastrigin, sphere, tsp
from .zdt import zdt

__all__ = ["Problem", "circle_cities", "dtlz", "dtlz2", "onemax", "rastrigin", "sphere", "tsp", "zdt"]
