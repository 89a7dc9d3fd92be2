"""Which command runs a config. Every config is a training run (`train`), a population run
(`evolve`) or a league (`league`, which `evolve` runs too); `run` takes any of them. Recognising
the workload from the config itself lets `run` choose, and lets a command given a config it cannot
run say in one line which command can, instead of listing the fields it does not know.
"""

from __future__ import annotations

from collections.abc import Sequence

from .base import ConfigError, RootSection
from .evolve import EvolveConfig
from .evorl import _algorithm_name, tree_config_model
from .programs import population_program, program_of
from .train import ALGORITHMS, RunConfig

#: The commands that run a config; `run` chooses among the other three.
RUN_COMMANDS = ("run", "train", "evolve", "league")


def workload_of(model: type[RootSection]) -> str:
    """The command named after a config model's workload: train, or its population program's
    (evolve, or league)."""
    return "train" if model is RunConfig else program_of(model).workload


def _positively_training(tree: dict, overrides: Sequence[str]) -> bool:
    """Whether a config `evolve` was given is surely a training run: it names an RL algorithm or has
    a section only training configs have. A config with neither (an empty file, say) stays
    `evolve`'s, which runs NSGA-II on its defaults."""
    if _algorithm_name(tree, overrides) in ALGORITHMS:
        return True
    roots = set(tree) | {text.partition("=")[0].strip().split(".")[0] for text in overrides}
    return bool(roots & (set(RunConfig.model_fields) - set(EvolveConfig.model_fields)))


def _wrong_command(command: str, right: str, tree: dict, overrides: Sequence[str], source: str,
                   resume: bool) -> ConfigError:
    name = _algorithm_name(tree, overrides)
    kind = "a training run" if right == "train" else f"a {name or 'population'} run"
    target = "--resume " + source if resume else source
    instead = f"lamarckian-hpc {right} {target} (or lamarckian-hpc run {target})"
    if command == "league":  # the words the league command has always used
        shown = name or ("ppo" if right == "train" else "nsga2")  # the defaults of a config without a name
        return ConfigError(f"error: league runs a config with algorithm.name: league, not {shown}; "
                           f"{source} is {kind}: run it with {instead}")
    return ConfigError(f"error: {command} cannot run {source}, {kind}: run it with {instead}")


def command_config_model(command: str, tree: dict, overrides: Sequence[str] = (), source: str = "config",
                         resume: bool = False) -> type[RootSection]:
    """The model `command` (run, train, evolve or league) validates `tree` with, once `overrides` are
    applied; a ConfigError of one line naming the command that can run it when `command` cannot.
    `source` names the config (a file, or the run file being resumed) in that line."""
    model = tree_config_model(tree, overrides)
    if command == "run":
        return model
    if command == "train":
        if model is not RunConfig:
            raise _wrong_command(command, workload_of(model), tree, overrides, source, resume)
        return model
    if command not in ("evolve", "league"):
        raise ValueError(f"{command} is not one of {', '.join(RUN_COMMANDS)}")
    if model is RunConfig and _positively_training(tree, overrides):
        raise _wrong_command(command, "train", tree, overrides, source, resume)
    program = population_program(_algorithm_name(tree, overrides))
    if command == "league" and program.workload != "league":
        raise _wrong_command(command, "evolve", tree, overrides, source, resume)
    return program.config
