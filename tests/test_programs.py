"""The table of population programs (`config/programs.py`) is the one place a program is looked
up: config loading, the command a config belongs to and the library's runner all follow its entry,
and reading it costs no torch, Ray or workflow import."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lamarckian_hpc.config import EvolveConfig, RunConfig
from lamarckian_hpc.config.evorl import tree_config_model
from lamarckian_hpc.config.programs import EVOLUTION, POPULATION_PROGRAMS, population_program, program_of
from lamarckian_hpc.config.workload import command_config_model, workload_of


@pytest.mark.parametrize("name", sorted(POPULATION_PROGRAMS))
def test_an_entry_is_found_by_the_name_its_config_gives(name: str) -> None:
    program = POPULATION_PROGRAMS[name]
    assert program.name == name and program.config().algorithm.name == name
    tree = {"algorithm": {"name": name}}
    assert population_program(name) is program and program_of(program.config) is program
    assert tree_config_model(tree) is program.config
    assert command_config_model(program.workload, tree) is program.config
    assert workload_of(program.config) == program.workload


def test_any_other_name_is_an_ec_run() -> None:
    assert population_program("nsga2") is EVOLUTION and population_program(None) is EVOLUTION
    assert program_of(EvolveConfig) is EVOLUTION and workload_of(EvolveConfig) == "evolve"
    assert tree_config_model({"algorithm": {"name": "cmaes"}}) is EvolveConfig
    assert workload_of(RunConfig) == "train"


def test_only_the_league_is_run_by_the_league_command() -> None:
    assert [name for name, program in POPULATION_PROGRAMS.items() if program.workload != "evolve"] == ["league"]


def test_reading_the_table_imports_no_runner() -> None:
    code = ("import sys, lamarckian_hpc.config.programs as p; p.population_program('pbt'); "
            "print(sorted(m for m in ('torch', 'ray', 'lamarckian_hpc.evorl', 'lamarckian_hpc.population') "
            "if m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "[]"
