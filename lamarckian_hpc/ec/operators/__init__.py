"""Variation operators as pure array functions over genomes and an explicit random generator."""

from .polynomial_mutation import polynomial_mutation
from .sbx import sbx

__all__ = ["polynomial_mutation", "sbx"]
