"""Which root model a config is validated with, from its `algorithm.name`: an RL algorithm's (or
no name and no `problem` section) is a training run's `RunConfig`; any other name selects its
population program's model (`programs`), the EC run's `EvolveConfig` for the EC algorithms.
The commands that take any config (`run`, `config show`, `launch`, the Slurm job) ask here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .base import ConfigError, RootSection
from .loading import read_config_file
from .programs import population_program
from .train import ALGORITHMS, RunConfig


def _read_tree(path: str | Path | None) -> dict:
    """The YAML file as a mapping; empty when there is none or it cannot be read (loading the
    config later reports why)."""
    if path is None:
        return {}
    try:
        return read_config_file(path)
    except ConfigError:
        return {}


def _algorithm_name(tree: dict, overrides: Sequence[str]) -> str | None:
    """`algorithm.name` from the overrides, else from the file; None when neither says."""
    for text in reversed(overrides):
        key, _, value = text.partition("=")
        if key.strip() == "algorithm.name":
            return value.strip()
    algorithm = tree.get("algorithm")
    name = algorithm.get("name") if isinstance(algorithm, dict) else None
    return None if name is None else str(name)


def evolve_config_model(path: str | Path | None, overrides: Sequence[str] = ()) -> type[RootSection]:
    """The config model of an evolve run, from `algorithm.name` in the overrides or the YAML file.
    A file that cannot be read picks EvolveConfig, whose loading then reports the problem."""
    return population_program(_algorithm_name(_read_tree(path), overrides)).config


def config_model(path: str | Path | None, overrides: Sequence[str] = ()) -> type[RootSection]:
    """The root model of any config file, for the commands that take train and evolve configs alike
    (`run`, `config show`, `launch`); see `tree_config_model`."""
    return tree_config_model(_read_tree(path), overrides)


def tree_config_model(tree: dict, overrides: Sequence[str] = ()) -> type[RootSection]:
    """The root model of a config tree (a file's, or the one a run file stored): an RL algorithm's
    name, or no name and no `problem` section, is a training run; otherwise the evolve model that
    the name selects."""
    name = _algorithm_name(tree, overrides)
    if name in ALGORITHMS or (name is None and "problem" not in tree
                              and not any(text.partition("=")[0].strip().startswith("problem.") for text in overrides)):
        return RunConfig
    return population_program(name).config
