"""Variation and selection operators as pure array functions over genomes and an explicit
random generator: real (SBX, polynomial mutation), integer (rounding SBX and polynomial
mutation), any independent-variable coding (uniform and one-point crossover), binary (bit
flip), permutation (order crossover, swap and inversion), and selection (tournament, crowded
comparison)."""

from .bit_flip import bit_flip_mutation
from .integer import integer_polynomial_mutation, integer_sbx
from .one_point_crossover import one_point_crossover
from .order_crossover import order_crossover
from .permutation_mutation import inversion_mutation, swap_mutation
from .polynomial_mutation import polynomial_mutation
from .sbx import sbx
from .selection import crowded_comparison, crowded_tournament, tournament
from .uniform_crossover import uniform_crossover

__all__ = ["bit_flip_mutation", "crowded_comparison", "crowded_tournament", "integer_polynomial_mutation",
           "integer_sbx", "inversion_mutation", "one_point_crossover", "order_crossover", "polynomial_mutation",
           "sbx", "swap_mutation", "tournament", "uniform_crossover"]
