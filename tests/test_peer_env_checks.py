"""The package's environments pass the peer libraries' own checks.

- Every `lamarckian/` id in Gymnasium's registry (found there after importing
  `lamarckian_hpc.envs`, so a new id is checked without editing this file) passes
  `gymnasium.utils.env_checker.check_env` with no warning but the advice in `KNOWN_WARNINGS`: spaces,
  dtypes, `reset(seed=...)` determinism, reset's info, step determinism. The env checked is the one the id's entry point
  builds (for the ALE ids, the wrapper stack the project ships), without `gym.make`'s own wrappers.
  The ids of optional extras (`lamarckian/Football-v0`, the ALE Pong ids) skip when their extra is
  not installed; any other id that cannot be made fails.
- Every module of `lamarckian_hpc.envs` with a `parallel_env` (what a `pettingzoo:<module>` env id
  names; today `pong_two_player`) makes a `pettingzoo.ParallelEnv` that passes PettingZoo's
  `parallel_api_test` and `parallel_seed_test`. `parallel_seed_test` compares one step only (it
  stops at `any(terminations)`, true for any non-empty dict), so whole seeded episodes are compared
  here too, and observations are checked against their spaces, which `parallel_api_test` does not.
- The async arena (`envs/async_arena.py`, `AsyncArenaMDP`) is neither a Gymnasium env nor a
  PettingZoo one: it is a native MDP of the asynchronous interface (`mdp.MDP`: `reset`, `agent_ids`,
  `set_action`/`pending_actions`, `tick` answering only the players whose turn it was, players
  joining and timing out mid-episode), which neither peer test can drive. What of them applies is
  checked here: observations inside the observation space with its dtype, the same space object
  on every call, and a seeded episode that repeats exactly.
"""

from __future__ import annotations

import importlib
import pkgutil
import warnings
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.envs.registration import load_env_creator
from gymnasium.utils.env_checker import check_env, data_equivalence
from pettingzoo.test import parallel_api_test, parallel_seed_test
from pettingzoo.utils.env import ParallelEnv

import lamarckian_hpc.envs as envs
from lamarckian_hpc.envs import atari, football
from lamarckian_hpc.envs.async_arena import AsyncArenaMDP

GYM_IDS = sorted(env_id for env_id in gym.registry if env_id.startswith("lamarckian/"))
#: Why an id of an optional extra cannot be made here (None: it can).
OPTIONAL_EXTRAS = {
    football.ENV_ID: lambda: None if football.football_available() else football.INSTALL_HINT,
    **{env_id: atari.atari_problem for env_id in atari.ENV_IDS},
}


#: Warnings `check_env` gives an id that are advice, not failures, and why they stay.
KNOWN_WARNINGS: dict[str, tuple[str, ...]] = {
    # Football's 115 floats (positions, directions, one-hots) have no bounds in the engine's spec.
    football.ENV_ID: ("minimum value is -infinity", "maximum value is infinity"),
    # The ALE ids are the preprocessing stack the project ships around ale-py's env (checked by
    # ale-py's own tests), so check_env advises checking the raw env instead.
    **{env_id: ("is different from the unwrapped version",) for env_id in atari.ENV_IDS},
}


def _parallel_modules() -> list[str]:
    """The modules of `lamarckian_hpc.envs` that a `pettingzoo:<module>` env id can name."""
    names = (info.name for info in pkgutil.iter_modules(envs.__path__))
    return sorted(name for name in names
                  if callable(getattr(importlib.import_module(f"{envs.__name__}.{name}"), "parallel_env", None)))


PARALLEL_MODULES = _parallel_modules()


def test_the_environments_are_discovered():
    assert "lamarckian/Pong-v0" in GYM_IDS and len(GYM_IDS) >= 4  # vector Pong, Football, ALE image and RAM
    assert "pong_two_player" in PARALLEL_MODULES


@pytest.mark.parametrize("env_id", GYM_IDS)
def test_gymnasium_check_env_passes(env_id: str):
    problem = OPTIONAL_EXTRAS.get(env_id, lambda: None)()
    if problem is not None:
        pytest.skip(problem)
    spec = gym.spec(env_id)
    creator = spec.entry_point if callable(spec.entry_point) else load_env_creator(spec.entry_point)
    env = creator(**spec.kwargs)
    env.unwrapped.spec = spec  # as gym.make does; check_env reads the render modes through it
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            check_env(env)
    finally:
        env.close()
    unexplained = [str(warning.message) for warning in caught
                   if not any(known in str(warning.message) for known in KNOWN_WARNINGS.get(env_id, ()))]
    assert unexplained == []


def _parallel_env(module: str, **kwargs: Any) -> Any:
    return importlib.import_module(f"{envs.__name__}.{module}").parallel_env(**kwargs)


@pytest.mark.parametrize("module", PARALLEL_MODULES)
def test_pettingzoo_parallel_api_test_passes(module: str):
    env = _parallel_env(module)
    assert isinstance(env, ParallelEnv) and env.unwrapped is env
    assert {"name", "render_modes"} <= set(env.metadata)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # Enough cycles for an episode to end, so the test also sees every agent removed.
        parallel_api_test(env, num_cycles=5000)
    assert [str(warning.message) for warning in caught] == []
    assert env.agents == [], "the episode did not end within the test's cycles"
    assert env.render() is None
    env.close()


@pytest.mark.parametrize("module", PARALLEL_MODULES)
def test_pettingzoo_parallel_seed_test_passes(module: str):
    parallel_seed_test(lambda: _parallel_env(module))


def _parallel_episode(module: str, seed: int) -> list[tuple]:
    """A whole episode of seeded random play: every step's five dicts."""
    env = _parallel_env(module)
    observations, infos = env.reset(seed=seed)
    for agent in env.possible_agents:
        env.action_space(agent).seed(seed)
    steps: list[tuple] = [(observations, infos)]
    while env.agents:
        for agent, observation in observations.items():
            assert env.observation_space(agent).contains(observation), (agent, observation)
        actions = {agent: env.action_space(agent).sample() for agent in env.agents}
        observations, *rest = env.step(actions)
        steps.append((actions, observations, *rest))
    env.close()
    return steps


@pytest.mark.parametrize("module", PARALLEL_MODULES)
def test_parallel_env_whole_seeded_episodes_repeat_and_observations_fit_their_spaces(module: str):
    first = _parallel_episode(module, seed=7)
    assert len(first) > 2
    assert data_equivalence(first, _parallel_episode(module, seed=7))
    assert not data_equivalence(first, _parallel_episode(module, seed=8))


def _arena_episode(seed: int) -> list[tuple]:
    """A whole arena episode under seeded random actions, with a player joining and one lagging out."""
    mdp = AsyncArenaMDP({"fast": 1, "slow": 3}, joins={5: {"late": 2}}, max_ticks=60, idle_timeout=4)
    mdp.reset(seed=seed)
    observation_space, action_space = mdp.observation_space("fast"), mdp.action_space("fast")
    assert observation_space is mdp.observation_space("late") and action_space is mdp.action_space("late")
    action_space.seed(seed)
    mdp.lag("slow", 30)
    trace: list[tuple] = []
    while not mdp.episode_over:
        for agent in mdp.agent_ids():
            observation = mdp.observation(agent)
            assert observation_space.contains(observation), (agent, observation)
            if agent not in mdp.pending_actions:
                mdp.set_action(agent, action_space.sample())
        outcomes = mdp.tick()
        for agent, outcome in outcomes.items():
            assert observation_space.contains(outcome.observation), (agent, outcome.observation)
            mdp.pending_actions.pop(agent, None)
            trace.append((mdp.core.clock, agent, outcome.observation, outcome.reward, outcome.terminated,
                          outcome.truncated, outcome.info))
    return trace


def test_async_arena_spaces_and_seeded_episodes():
    first = _arena_episode(seed=3)
    agents = {step[1] for step in first}
    assert agents == {"fast", "slow", "late"} and any(step[6].get("left") == "timeout" for step in first)
    assert data_equivalence(first, _arena_episode(seed=3))
    assert not data_equivalence(first, _arena_episode(seed=4))
