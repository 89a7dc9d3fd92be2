"""The population programs a config can name, one entry each: the one table that config loading,
the library, the command line's result tables and the configuration reference look them up in.

A population program is what `algorithm.name` of an evolve config selects beyond the EC
algorithms: PBT, EMOGI, automated game testing (`wuji`) and the league. Its entry says which
config model validates the file, which command is named after its workload, which function runs
it, which prints its result, and what the configuration reference says of it; any other name is
an EC run (NSGA-II, GA, ES, CMA-ES, game balancing), the `EVOLUTION` entry. Adding a program is
its config model (a module of `config/`), its program and command module (runner and result table),
and one entry below.

The runner and the result table are named by import path ("module:function", as
`runtime/algorithms.py` names an RL algorithm's torch-side parts), so that loading a config
imports no torch, Ray or workflow code, and `config` stays a leaf: the library and `cli_results`
import them, when a run starts or its result is printed.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .base import RootSection
from .emogi import EMOGIConfig
from .evolve import EvolveConfig
from .game_testing import GameTestingConfig
from .league_run import LeagueRunConfig
from .pbt import PBTConfig


@dataclass(frozen=True)
class PopulationProgram:
    name: str
    #: The root model a config naming it is validated with.
    config: type[RootSection]
    #: (config, run file path, config file or None, resume) -> the run's summary.
    runner: str
    #: (RunResult, stdout Console, stderr Console) -> None: the tables `run`, `evolve` and `league` print.
    result_table: str
    #: What the configuration reference says of its config, under the section named after it.
    reference: str
    #: The command named after its workload, which `run` chooses and the others name in their errors.
    workload: str = "evolve"

    def load(self, part: str) -> Callable[..., Any]:
        """The function `part` ("runner" or "result_table") names, imported now."""
        module, _, attribute = getattr(self, part).partition(":")
        return getattr(importlib.import_module(module), attribute)


#: The EC run: what an `algorithm.name` no other entry has selects.
EVOLUTION = PopulationProgram(
    "evolution", EvolveConfig, runner="lamarckian_hpc.population.evolution_command:run_evolution",
    result_table="lamarckian_hpc.population.evolution_command:print_evolution_result",
    reference="Read by `lamarckian-hpc evolve` (`EvolveConfig`) for the EC algorithms; `algorithm.name` picks "
              "the section (default `nsga2`), and an unknown name is an error that lists the allowed ones. "
              "`nsga2` needs a multi-objective problem (ZDT, DTLZ, `balance`), `ga` a single-objective one "
              "(`sphere`, `rastrigin`, `onemax`, `tsp`), and a named crossover or mutation must fit the "
              "problem's coding. For `balance`, `algorithm.crossover_probability` applies to the lineup "
              "crossover and the eta fields are unused.")

#: `algorithm.name` -> its program, in the order the configuration reference shows them.
POPULATION_PROGRAMS: dict[str, PopulationProgram] = {entry.name: entry for entry in (
    PopulationProgram(
        "pbt", PBTConfig, runner="lamarckian_hpc.evorl.pbt_command:run_pbt",
        result_table="lamarckian_hpc.evorl.pbt_command:print_pbt_result",
        reference="Population-based training of PPO learners (`PBTConfig`). `seed`, `env`, `model` and `storage` "
                  "are those of `train`; `ppo` holds the fields of `algorithm.name: ppo`, the starting point of the "
                  "searched hyperparameters, and `ppo.anneal_learning_rate` must stay false while `learning_rate` "
                  "is searched."),
    PopulationProgram(
        "emogi", EMOGIConfig, runner="lamarckian_hpc.evorl.emogi_command:run_emogi",
        result_table="lamarckian_hpc.evorl.emogi_command:print_emogi_result",
        reference="NSGA-II over behaviour reward weights of PPO policies (`EMOGIConfig`). `env`, `model`, `ppo` and "
                  "`storage` are those of `train`, but `env.id` defaults to, and must be, `lamarckian/Pong-v0`, "
                  "and `env.kwargs` must not set `move_reward` or `stay_reward`: EMOGI sets them per policy."),
    PopulationProgram(
        "wuji", GameTestingConfig, runner="lamarckian_hpc.evorl.game_testing_command:run_game_testing",
        result_table="lamarckian_hpc.evorl.game_testing_command:print_game_testing_result",
        reference="Automated testing of the built-in game (`GameTestingConfig`, `configs/game_testing.yaml`); its "
                  "episodes are played in the command's own process unless `runtime.mode` says fork or ray."),
    PopulationProgram(
        "league", LeagueRunConfig, runner="lamarckian_hpc.evorl.league_command:run_league",
        result_table="lamarckian_hpc.evorl.league_command:print_league_result", workload="league",
        reference="AlphaStar's league of PPO learners on a two-player PettingZoo game (`LeagueRunConfig`, "
                  "`configs/league_pong.yaml`; `lamarckian-hpc league` runs it too). `model`, `ppo` and `storage` "
                  "are those of `train`; `league` is the section below."),
)}


def population_program(name: str | None) -> PopulationProgram:
    """The program `algorithm.name` selects: its entry, or the EC run's for any other name."""
    return POPULATION_PROGRAMS.get(str(name), EVOLUTION)


def program_of(model: type[RootSection]) -> PopulationProgram:
    """The program a root config model belongs to (the EC run's for EvolveConfig)."""
    return next((entry for entry in POPULATION_PROGRAMS.values() if entry.config is model), EVOLUTION)
