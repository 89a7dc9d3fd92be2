"""The game-balancing test: serial and Ray evaluation (the asynchronous driver, one task per
lineup) give the same population; `evolve configs/balance.yaml` records every generation and lists
imbalanced lineups; with a planted overpowered hero in the data, the run finds imbalanced lineups
that field it, led by it; mismatched configs are one-line errors."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from local_ray import local_ray

from lamarckian_hpc.config import ConfigError, EvolveConfig, load_config
from lamarckian_hpc.ec import NSGA2
from lamarckian_hpc.games.balance import BalanceProblem
from lamarckian_hpc.games.data import BUILT_IN_DATA
from lamarckian_hpc.games.report import summarize
from lamarckian_hpc.population.evolution import EvolveProgram, evolve
from lamarckian_hpc.population.evolve_components import make_problem
from lamarckian_hpc.population.workflow import PopulationRuntime, run_population
from lamarckian_hpc.storage import open_run

ray = pytest.importorskip("ray")
ROOT = Path(__file__).resolve().parents[1]
OVERPOWERED = "galen"


def _config(*overrides: str) -> EvolveConfig:
    return load_config(ROOT / "configs" / "balance.yaml", ["algorithm.population_size=8", "algorithm.generations=3",
                                                           *overrides], EvolveConfig)


def test_balance_runs_the_same_serially_and_on_ray_workers():
    config = _config("runtime.mode=serial")
    problem = make_problem(config)
    assert isinstance(problem, BalanceProblem)
    serial = evolve(config, problem)
    assert isinstance(serial, NSGA2)  # with the lineup operators (games.lineup.lineup_operators)
    with local_ray():  # a Ray of the test's own, in a temp dir of its own
        program = EvolveProgram(_config("runtime.mode=ray", "runtime.num_workers=2"), problem)
        run_population(program, PopulationRuntime.of(program.config.runtime))
        distributed = program.algorithm
        assert program.last_evaluations is not None
        workers = set(program.last_evaluations.workers.tolist())
    np.testing.assert_array_equal(serial.genomes, distributed.genomes)
    np.testing.assert_array_equal(serial.objectives, distributed.objectives)
    assert workers and os.getpid() not in workers  # every lineup was evaluated by a Ray worker
    assert problem.coding.valid(distributed.genomes).all()


def test_evolve_command_runs_the_balancing_test(tmp_path, capsys, monkeypatch):
    from lamarckian_hpc.cli import main

    monkeypatch.setenv("COLUMNS", "200")
    status = main(["evolve", str(ROOT / "configs" / "balance.yaml"), "runtime.mode=serial",
                   "algorithm.population_size=10", "algorithm.generations=4", f"storage.directory={tmp_path}",
                   "storage.run_name=balance"])
    assert status == 0
    output = capsys.readouterr().out
    assert "imbalanced lineups" in output and "strongest team" in output
    assert output.strip().splitlines()[-1] == str(tmp_path / "balance.h5")
    with open_run(tmp_path / "balance.h5") as run:
        assert run.closed_cleanly
        population = run.population()
        assert sorted(set(population["generation"].tolist())) == list(range(4))
        assert population["genome"].shape == (40, 3 * 37) and population["objectives"].shape == (40, 3)
        assert (population["objectives"] <= 0).all()
        assert len(run.metric("hypervolume")) == 4


def test_planted_overpowered_hero_leads_the_imbalanced_lineups(tmp_path):
    folder = tmp_path / "game"
    shutil.copytree(BUILT_IN_DATA, folder)
    shutil.copy(ROOT / "tests" / "data" / "overpowered_heroes.yaml", folder / "heroes.yaml")
    config = load_config(ROOT / "configs" / "balance.yaml",
                         ["runtime.mode=serial", f"problem.game_data={folder}", "algorithm.population_size=20",
                          "algorithm.generations=8"], EvolveConfig)
    problem = make_problem(config)
    algorithm = evolve(config, problem)
    summary = summarize(problem, algorithm.genomes, algorithm.objectives)
    fielding = [score for score in summary.imbalanced if any(t.startswith(OVERPOWERED + "+") for t in score.teams)]
    share = len(fielding) / max(len(summary.imbalanced), 1)
    # a random lineup fields a given hero with probability 5/37 = 0.14
    assert len(fielding) >= 3 and share >= 0.5, (len(fielding), len(summary.imbalanced))
    assert summary.heroes_to_weaken[0][0] == OVERPOWERED
    assert all(score.teams[score.strongest].startswith(OVERPOWERED) for score in fielding)
    assert max(score.resources_multiple for score in fielding) > 2


@pytest.mark.parametrize("overrides, message", [
    (["problem.name=zdt1", "problem.game_data=somewhere"], "game_data applies to the balance problem only"),
    (["algorithm.name=ga"], "algorithm ga needs a single-objective problem"),
    (["problem.num_variables=10"], "num_variables does not apply to balance"),
])
def test_balance_config_mismatches_are_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message) as error:
        _config(*overrides)
    assert "\n" not in str(error.value)


def test_bad_game_data_folder_is_one_line(tmp_path, capsys):
    from lamarckian_hpc.cli import main

    status = main(["evolve", str(ROOT / "configs" / "balance.yaml"), "runtime.mode=serial",
                   f"problem.game_data={tmp_path / 'nowhere'}", f"storage.directory={tmp_path}"])
    assert status == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and "no such folder" in lines[0]
    assert not list(tmp_path.glob("*.h5"))  # nothing was started
