"""Every config in configs/ runs: a few hundred env frames, or one generation of offspring, through
`lamarckian_hpc.run`, to a run file that holds what a finished run holds.

Why: the configs are what users start from, and each one goes through a different part of the
package (a runtime, an algorithm's runner, an environment). A field renamed, a validator
tightened or a runner broken shows up here, for every config, in about a minute, instead of in a
user's first run or in the benchmark of the week. The test is parametrized over the directory's
listing, so a new config is covered without editing this module; only a new algorithm needs an
entry in SMOKE, which says how to cut its configs down and what its run file must hold (the test
fails, saying so, when one is missing).

Cutting down keeps each config's own environment, model and algorithm settings and changes only
their size: the budget, the batch, the population, the generations. Runs stay on this machine
with the fewest processes the config allows: serial where a config can run serially, otherwise
(A3C's gradient-computing actors, multi-agent training) one actor on a local Ray. Configs whose
environment needs an optional extra (ALE, Google Research Football) skip naming the extra, or fail
where CI's LAMARCKIAN_HPC_REQUIRE_<PART>=1 says it is installed.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from optional_parts import skip_unless_required

import lamarckian_hpc
from lamarckian_hpc.envs import atari, football
from lamarckian_hpc.storage import RunReader, open_run

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))
#: Env frames of a cut-down training run: two updates of 128 frames.
FRAMES = 256
TRAIN_BATCH = ["algorithm.batch_size=128", "algorithm.num_minibatches=2", "algorithm.num_epochs=1"]
PPO_SECTION = ["ppo.batch_size=128", "ppo.num_minibatches=2", "ppo.num_epochs=1"]
#: Games of the built-in Pong end at the first point, so evaluations and episodes are short.
SHORT_PONG = ["env.kwargs.points_to_win=1"]


# --- what each optional environment needs ------------------------------------------------------

def _football_problem() -> str | None:
    return None if football.football_available() else football.INSTALL_HINT


def _module_problem(module: str, extra: str) -> Callable[[], str | None]:
    return lambda: None if importlib.util.find_spec(module) else f"{module} is not installed (the {extra} extra)"


#: env.id (or its prefix) -> (the part's name in LAMARCKIAN_HPC_REQUIRE_<PART>, why it cannot run here or None).
OPTIONAL_ENVS: dict[str, tuple[str, Callable[[], str | None]]] = {
    **{env_id: ("atari", atari.atari_problem) for env_id in atari.ENV_IDS},
    football.ENV_ID: ("football", _football_problem),
    "pettingzoo:mpe2.": ("multiagent", _module_problem("mpe2", "multiagent")),
}


def _skip_without_optional_parts(config: Any) -> None:
    env = getattr(config, "env", None)
    for prefix, (part, problem) in OPTIONAL_ENVS.items():
        if env is not None and env.id.startswith(prefix) and (reason := problem()) is not None:
            skip_unless_required(part, reason)


# --- how to cut each algorithm down, and what its finished run file holds ----------------------

def _train(config: Any) -> list[str]:
    """A training run of FRAMES frames on 4 environments; serial, or one Ray actor where the
    algorithm or multi-agent training needs actor processes."""
    overrides = [f"stop.total_env_steps={FRAMES}", "stop.target_return=null", "stop.max_wall_seconds=null",
                 "env.num_envs=4", "runtime.device=cpu"]
    if config.algorithm.name == "a3c" or config.multiagent is not None:
        overrides += ["runtime.mode=ray", "runtime.num_actors=1", "runtime.ray_address=null"]
    else:
        overrides += ["runtime.mode=serial"]
    return overrides


def _ppo(config: Any) -> list[str]:
    if config.multiagent is None:
        return _train(config) + TRAIN_BATCH
    # A batch is one message of 2 envs: rollout_steps ticks of every agent (of a shared policy).
    mapping = config.multiagent.mapping
    steps = config.runtime.rollout_steps * 2 * (len(mapping) if isinstance(mapping, dict) else 1)
    return _train(config) + ["env.num_envs=2", f"algorithm.batch_size={steps}", "algorithm.num_epochs=1"]


def _dqn(config: Any) -> list[str]:
    return _train(config) + ["algorithm.learning_starts=64", "algorithm.minibatch_size=32",
                             "algorithm.replay_capacity=1000", "algorithm.epsilon_decay_frames=256"]


def _sac(config: Any) -> list[str]:
    return _train(config) + ["algorithm.learning_starts=64", "algorithm.minibatch_size=32",
                             "algorithm.replay_capacity=1000"]


def _a3c(config: Any) -> list[str]:
    return _train(config) + ["runtime.rollout_steps=16"]


def _trained(reader: RunReader, result: Any) -> None:
    """Metric rows of the updates: a finite critic loss (per policy in a multi-agent run)."""
    assert result.summary.env_frames >= FRAMES and result.summary.updates >= 1, result.summary
    losses = [name for name in reader.metric_names() if name.split(".")[0] == "loss_value" and len(reader.metric(name))]
    assert losses, f"no loss_value rows; rows per metric: {reader.summary().counts}"
    assert all(np.isfinite(reader.metric(name).value).all() for name in losses)
    assert reader.summary().env_frames > 0


def _ec(config: Any) -> list[str]:
    """The initial population and one generation of offspring, of 8, evaluated in this process."""
    overrides = ["runtime.mode=serial", "runtime.ray_address=null", "algorithm.population_size=8",
                 "algorithm.generations=2"]
    if config.algorithm.name == "ga":
        overrides += ["algorithm.offspring_per_step=4", f"algorithm.elite_count={min(config.algorithm.elite_count, 2)}"]
    return overrides


def _evolved(reader: RunReader, result: Any) -> None:
    """The population history: the 8 of the initial generation and the offspring of the next, with
    finite objectives."""
    population = reader.population()
    generations = population["generation"]
    assert sorted(set(generations.tolist())) == [0, 1] and (generations == 0).sum() == 8
    assert np.isfinite(population["objectives"]).all()


def _pbt(config: Any) -> list[str]:
    """Two members, one interval of 256 frames (two updates) each, in this process."""
    return ["runtime.mode=serial", "runtime.ray_address=null", "env.num_envs=4", *PPO_SECTION,
            "algorithm.population_size=2", "algorithm.interval_env_frames=256", "stop.total_env_frames=256",
            "stop.target_return=null", "stop.max_wall_seconds=null"]


def _members(reader: RunReader, result: Any) -> None:
    """Each member in the population history, trained for its interval, and PBT's metric rows."""
    population = reader.population()
    assert len(population["id"]) >= 2 and (population["env_frames"] >= 256).all()
    assert len(reader.metric("best_return")) >= 1


def _emogi(config: Any) -> list[str]:
    """Two policies of 256 frames, each scored on one short game, in this process."""
    return ["runtime.mode=serial", "runtime.ray_address=null", "env.num_envs=2", *SHORT_PONG, *PPO_SECTION,
            "algorithm.population_size=2", "algorithm.generations=1",
            "algorithm.initial_env_frames=256", "algorithm.offspring_env_frames=256",
            "algorithm.evaluation_episodes=1"]


def _policies(reader: RunReader, result: Any) -> None:
    """Both trained policies in the population history, scored, and the generation's front."""
    population = reader.population()
    assert len(population["id"]) == 2 and (population["env_frames"] >= 256).all()
    assert np.isfinite(population["objectives"]).all() and len(reader.metric("front_size")) == 1


def _league(config: Any) -> list[str]:
    """One generation: each learner one update of 128 frames, then one short game against the
    scripted player, in this process."""
    short = SHORT_PONG if "pong" in config.env.id else []
    return ["runtime.mode=serial", "runtime.ray_address=null", "env.num_envs=2", *short, *PPO_SECTION,
            "algorithm.generations=1", "algorithm.scripted_evaluation_interval=1",
            "algorithm.scripted_evaluation_episodes=1"]


def _matches(reader: RunReader, result: Any) -> None:
    """A rating row per learner for the generation, and the main agent's score against the script."""
    elo = [name for name in reader.metric_names() if name.startswith("elo_")]
    assert elo and all(len(reader.metric(name)) == 1 for name in elo), reader.summary().counts
    assert np.isfinite(reader.metric("main_score_vs_scripted").value).all()


def _wuji(config: Any) -> list[str]:
    """Eight episodes: an initial population of 4 and one generation of offspring."""
    return ["runtime.mode=serial", "runtime.ray_address=null", "algorithm.population_size=4", "algorithm.episodes=8"]


def _episodes(reader: RunReader, result: Any) -> None:
    """Every episode's action sequence in the history, and the search's metric rows."""
    population = reader.population()
    assert sorted(set(population["generation"].tolist())) == [0, 1] and len(population["id"]) == 8
    assert len(reader.metric("bugs_found")) >= 1


@dataclass(frozen=True)
class Smoke:
    cut_down: Callable[[Any], list[str]]  # the validated config -> overrides that make it small
    finished: Callable[[RunReader, Any], None]  # asserts on the run file (and the RunResult)


#: algorithm.name -> how its configs are cut down and checked.
SMOKE: dict[str, Smoke] = {
    "ppo": Smoke(_ppo, _trained), "impala": Smoke(lambda config: _train(config) + TRAIN_BATCH, _trained),
    "dqn": Smoke(_dqn, _trained), "a3c": Smoke(_a3c, _trained), "sac": Smoke(_sac, _trained),
    **{name: Smoke(_ec, _evolved) for name in ("nsga2", "ga", "es", "cmaes")},
    "pbt": Smoke(_pbt, _members), "emogi": Smoke(_emogi, _policies), "league": Smoke(_league, _matches),
    "wuji": Smoke(_wuji, _episodes),
}


def test_every_config_file_is_found() -> None:
    """An empty listing would make the parametrized test below vanish instead of fail."""
    assert len(CONFIGS) >= 20 and all(path.suffix == ".yaml" for path in CONFIGS)


#: Configs whose smoke run takes over 15 s on two cores: CI's second pass runs them.
SLOW_SMOKE = ("a3c_cartpole",)


@pytest.mark.parametrize("config_file", [pytest.param(path, marks=pytest.mark.second_pass) if path.stem in SLOW_SMOKE
                                         else path for path in CONFIGS], ids=lambda path: path.stem)
def test_config_runs_to_a_finished_run_file(config_file: Path, tmp_path: Path) -> None:
    config = lamarckian_hpc.prepare(config_file).config
    name = config.algorithm.name
    assert name in SMOKE, f"{config_file.name}: no entry for algorithm {name!r} in SMOKE (tests/test_configs_smoke.py)"
    smoke = SMOKE[name]
    overrides = smoke.cut_down(config)
    lamarckian_hpc.prepare(config_file, overrides)  # the cut-down config is valid, also where the run skips
    _skip_without_optional_parts(config)
    result = lamarckian_hpc.run(config_file, overrides, output=tmp_path / "smoke.h5")
    assert result.path == tmp_path / "smoke.h5" and result.path.is_file()
    with open_run(result.path) as reader:
        assert reader.closed_cleanly, f"{config_file.name}: the run file was not closed as finished"
        assert reader.config["algorithm"]["name"] == name
        smoke.finished(reader, result)
