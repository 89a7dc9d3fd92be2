"""The built-in strategy game: its tables load and bad ones fail with one line naming file, row and
field; battles are deterministic for a seed; lineup operators never produce an invalid lineup; a
lineup's evaluation takes milliseconds; with every planted bug off, no bug symptom ever shows."""

from __future__ import annotations

import shutil
import time

import numpy as np
import pytest

from lamarckian_hpc.games import SYMPTOMS, Battle, GameDataError, compile_spec, load_game_data
from lamarckian_hpc.games.balance import BalanceProblem
from lamarckian_hpc.games.data import BUILT_IN_DATA
from lamarckian_hpc.games.lineup import lineup_crossover, lineup_mutation
from lamarckian_hpc.games.testing import random_play


@pytest.fixture(scope="module")
def data():
    return load_game_data()


def test_built_in_tables_load(data):
    assert len(data.heroes) >= 30 and len(data.soldiers) == 3 and len(data.equipment) >= 10
    assert all(len(hero.skills) == 4 for hero in data.heroes)
    assert not any(data.bugs.model_dump().values())  # planted bugs are off by default


@pytest.mark.parametrize("old, new, message", [
    ("health: 800, attack: 53", "health: -5, attack: 53", "heroes.yaml: heroes.aldric.health: Input should be greater than 0"),
    ("skills: [mend, rally, renewal, arrow_rain]", "skills: [mend, rally, renewal, fireball]",
     "heroes.yaml: heroes: aldric: unknown skill 'fireball'"),
    ("{name: aldric,", "{name: aldric, mana: 3,", "heroes.aldric.mana: Extra inputs are not permitted"),
    # Tables are read as configs are: no YAML aliases (an alias bomb expands without bound), no repeated keys.
    ("health: 800, attack: 53", "health: &h 800, attack: *h", "alias *h is not allowed"),
    ("health: 800, attack: 53", "health: 800, health: 900, attack: 53", "duplicate key 'health'"),
])
def test_bad_table_is_one_line_naming_the_row(tmp_path, old, new, message):
    folder = tmp_path / "game"
    shutil.copytree(BUILT_IN_DATA, folder)
    heroes = (folder / "heroes.yaml").read_text()
    assert old in heroes
    (folder / "heroes.yaml").write_text(heroes.replace(old, new, 1))
    with pytest.raises(GameDataError) as error:
        load_game_data(folder)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_missing_table_is_reported(tmp_path):
    folder = tmp_path / "game"
    shutil.copytree(BUILT_IN_DATA, folder)
    (folder / "skills.yaml").unlink()
    with pytest.raises(GameDataError, match="missing file .*skills.yaml"):
        load_game_data(folder)


def test_battle_is_deterministic_for_a_seed(data):
    first, second = compile_spec(data, data.baselines[0].teams[0]), compile_spec(data, data.baselines[1].teams[2])
    runs = [Battle(first, second, data.rules, data.bugs, seed).run() for seed in (3, 3, 4)]
    assert runs[0] == runs[1]
    assert runs[0].remaining_strength != runs[2].remaining_strength  # the seed matters
    assert 0 < runs[0].time <= data.rules.time_limit


def test_units_act_on_their_own_cooldowns(data):
    """Asynchronous turns: a faster hero gets proportionally more turns than a slower one."""
    turns = {0: 0, 2: 0}
    first, second = compile_spec(data, data.baselines[0].teams[0]), compile_spec(data, data.baselines[0].teams[1])
    battle = Battle(first, second, data.rules, data.bugs, 0)
    original = battle._turn

    def counting(unit):
        for index in turns:
            turns[index] += unit is battle.units[index]
        original(unit)

    battle._turn = counting
    battle.run()
    expected = second.hero_cooldown / first.hero_cooldown
    assert turns[0] / turns[2] == pytest.approx(expected, rel=0.25)


def test_lineup_operators_never_produce_an_invalid_lineup(data):
    problem = BalanceProblem(data=data)
    coding, rng = problem.coding, np.random.default_rng(0)
    genomes = coding.sample(rng, 200)
    assert coding.valid(genomes).all()
    for _ in range(30):
        a, b = lineup_crossover(coding, genomes[:100], genomes[100:], rng, 1.0)
        genomes = lineup_mutation(coding, np.concatenate([a, b]), rng)
        assert coding.valid(genomes).all()
        for genome in genomes[:20]:
            heroes = [hero for hero, _, _ in coding.decode(genome)]
            assert len(set(heroes)) == len(heroes) == data.rules.lineup_size
    broken = genomes[:1].copy()
    broken[0, 1] = broken[0, 0]  # a hero twice
    assert not coding.valid(broken).any()


def test_one_lineup_evaluation_takes_milliseconds(data):
    problem = BalanceProblem(data=data)
    genomes = problem.initialize(np.random.default_rng(1), 20)
    problem.evaluate(genomes[:2])  # compile the teams once
    start = time.perf_counter()
    objectives = problem.evaluate(genomes)
    per_lineup = (time.perf_counter() - start) / len(genomes)
    print(f"one lineup evaluation: {per_lineup * 1e3:.1f} ms")
    assert per_lineup < 0.1
    assert objectives.shape == (20, 3) and (objectives <= 0).all()  # maximised objectives, negated


def test_no_symptom_without_planted_bugs(data):
    assert set(SYMPTOMS) == {"crash", "negative_damage", "health_above_maximum", "stuck"}
    assert random_play(data, 200, seed=0).bugs == {}


def test_simulator_and_searches_import_no_torch_ray_or_files():
    """The game, the balancing problem and the testing search stay plain numpy and python, so that a
    worker evaluating lineups or playing episodes imports nothing heavy; the command and the
    workflow's program (evorl/game_testing_*.py, run in the command's process) touch files and the
    runtime."""
    import ast
    from pathlib import Path

    import lamarckian_hpc.games as games

    forbidden = {"torch", "ray", "h5py", "zmq", "threading", "multiprocessing"}
    for path in Path(games.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            assert not {name.split(".")[0] for name in names} & forbidden, f"{path.name} imports {names}"
        assert "..storage" not in path.read_text() and "..runtime" not in path.read_text(), path.name
