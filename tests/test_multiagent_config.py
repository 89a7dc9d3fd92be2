"""The `multiagent:` section of a train config: what it accepts, and one clear line naming the field
and the allowed values for what it does not, before any process starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from lamarckian_hpc.cli import main
from lamarckian_hpc.config import ConfigError, apply_overrides, load_config
from lamarckian_hpc.multiagent import configured_mapping

pytest.importorskip("mpe2")

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "multiagent_simple_spread.yaml"
SPREAD = ["env.id=pettingzoo:mpe2.simple_spread_v3"]


def _load(*overrides: str):
    return apply_overrides({}, [*SPREAD, *overrides], "test")


def test_the_simple_spread_config_loads_with_one_shared_policy_and_a_centralised_critic():
    config = load_config(CONFIG)
    assert config.multiagent is not None
    assert config.multiagent.policies == ("shared",) and config.multiagent.trained == ("shared",)
    assert config.multiagent.centralized_critic and config.runtime.mode == "ray"
    assert config.env.id == "pettingzoo:mpe2.simple_spread_v3" and config.env.kwargs["N"] == 3


@pytest.mark.parametrize("mapping", ["random", "round_robin", "{agent_0: a, agent_1: b}", "my_package.maps:by_team"])
def test_every_kind_of_mapping_is_accepted(mapping):
    config = _load("multiagent.policies=[a, b]", f"multiagent.mapping={mapping}")
    assert config.multiagent.mapping in ("random", "round_robin", "my_package.maps:by_team") \
        or config.multiagent.mapping == {"agent_0": "a", "agent_1": "b"}


@pytest.mark.parametrize(("overrides", "message"), [
    (["multiagent.mapping=nearest"], r"multiagent\.mapping: must be random, round_robin, a map \{agent_id: policy\} "
                                     r"or module:function \(got 'nearest'\)"),
    (["multiagent.mapping=[a]"], r"multiagent\.mapping: must be random, round_robin, .* got a list"),
    (["multiagent.mapping={}"], r"multiagent\.mapping: an empty map binds no agent"),
    (["multiagent.policies=[a, b]", "multiagent.mapping={agent_0: a, agent_1: c}"],
     r"multiagent: mapping: maps agents to \['c'\], which are not in policies \['a', 'b'\]"),
    (["multiagent.policies=[a]", "multiagent.policies_to_train=[b]"],
     r"multiagent: policies_to_train: \['b'\] not in policies \['a'\]"),
    (["multiagent.policies=[a.b]"], r"multiagent: policies: \['a.b'\] are not policy ids"),
    (["multiagent.policies=[a, a]"], r"multiagent: policies: ids must be unique"),
    (["multiagent.policies=[]"], r"multiagent\.policies: .*at least 1 item"),
    (["multiagent.shared_layers=-1"], r"multiagent\.shared_layers: Input should be greater than or equal to 0"),
    (["multiagent.centralized_critic=sometimes"], r"multiagent\.centralized_critic: Input should be a valid boolean"),
    (["multiagent.policies_to_train=[]", "multiagent.centralized_critic=true"],
     r"centralized_critic: no policy is trained"),
    (["multiagent.teams=2"], r"multiagent\.teams: unknown field \(allowed: policies, policies_to_train, mapping"),
    (["multiagent.policies=[a]", "algorithm.name=dqn"], r"algorithm\.name: multiagent training runs ppo, got 'dqn'"),
    (["multiagent.policies=[a]", "runtime.mode=serial"], r"runtime\.mode: multiagent training from a config runs "
                                                         r"on actor processes \(ray\)"),
    (["multiagent.policies=[a]", "runtime.sampling=sync"], r"runtime\.sampling: multiagent training needs async"),
    (["multiagent.policies=[a]", "env.max_episode_steps=10"], r"env\.max_episode_steps: not applied to multi-agent environments"),
    (["multiagent.policies=[a]", "env.id=CartPole-v1"], r"env\.id: multiagent training needs pettingzoo:<module>.* "
                                                        r"got 'CartPole-v1'"),
    (["multiagent.policies=[a]", "env.id=pettingzoo:mpe2/simple"], r"env\.id: multiagent training needs pettingzoo"),
    ([], r"env\.id: 'pettingzoo:mpe2.simple_spread_v3' is a PettingZoo environment; it needs a multiagent section"),
])
def test_bad_values_are_one_line_naming_the_field(overrides, message):
    with pytest.raises(ConfigError, match=message) as caught:
        _load(*overrides)
    assert "\n" not in str(caught.value) and "<root>" not in str(caught.value)


def test_the_command_line_refuses_a_bad_mapping_before_anything_starts(capsys):
    assert main(["train", str(CONFIG), "multiagent.mapping=closest"]) == 2
    error = capsys.readouterr().err
    assert "multiagent.mapping: must be random, round_robin, a map {agent_id: policy} or module:function" in error


def test_a_function_mapping_is_imported_where_agents_are_mapped():
    mapping = configured_mapping("operator:itemgetter", ("a", "b"))
    assert callable(mapping)
    with pytest.raises(ValueError, match=r"multiagent\.mapping: cannot import 'no_such_module_here'"):
        configured_mapping("no_such_module_here:f", ("a",))
    with pytest.raises(ValueError, match=r"multiagent\.mapping: operator has no function 'no_such_function'"):
        configured_mapping("operator:no_such_function", ("a",))
    table = configured_mapping({"agent_0": "a"}, ("a",))
    assert table("agent_0", 0) == "a"


def test_a_fixed_map_must_bind_every_agent_of_the_environment():
    from lamarckian_hpc.runtime.actor.multiagent_sampling import multiagent_spaces

    config = _load("multiagent.policies=[a, b]", "multiagent.mapping={agent_0: a, agent_1: b}")
    with pytest.raises(ValueError, match=r"multiagent\.mapping: agents \['agent_2'\] of .* have no policy in the map"):
        multiagent_spaces(config)
    spaces = multiagent_spaces(_load("multiagent.centralized_critic=true"))
    assert spaces.observation_space.shape == (18,) and spaces.global_state_size == 54
    assert spaces.agents == ("agent_0", "agent_1", "agent_2") and spaces.row_space.shape == (72,)


def test_an_environment_module_that_is_not_there_is_named():
    from lamarckian_hpc.runtime.actor.multiagent_sampling import multiagent_spaces

    with pytest.raises(ValueError, match=r"env\.id: cannot import 'mpe2.no_such_env_v0'"):
        multiagent_spaces(apply_overrides({}, ["env.id=pettingzoo:mpe2.no_such_env_v0", "multiagent.policies=[a]"]))
    with pytest.raises(ValueError, match=r"env\.id: operator has neither parallel_env\(\) nor env\(\)"):
        multiagent_spaces(apply_overrides({}, ["env.id=pettingzoo:operator", "multiagent.policies=[a]"]))
