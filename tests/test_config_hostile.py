"""Config files written to hurt: deep nesting, alias bombs, duplicate keys, values a lax reading
would coerce, values too long to echo. Each ends in one short ConfigError line, at once; a value
that is merely written differently (`1e-3`, a list for a tuple) still loads."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from lamarckian_hpc.config import ConfigError, RunConfig, load_config, parse_override
from lamarckian_hpc.config.evorl import config_model

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
#: An error line is read by a person: the longest one here is well under this.
SHORT_LINE = 400


def _alias_bomb(levels: int, indent: str = "") -> str:
    """`levels` anchored lists of ten aliases of the one before: 10**levels strings once expanded."""
    lines = [f'{indent}l0: &l0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for level in range(1, levels):
        aliases = ", ".join([f"*l{level - 1}"] * 10)
        lines.append(f"{indent}l{level}: &l{level} [{aliases}]")
    return "\n".join(lines) + "\n"


def _error(tmp_path: Path, text: str, overrides: tuple[str, ...] = ()) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    started = time.monotonic()
    with pytest.raises(ConfigError) as caught:
        load_config(path, overrides)
    assert time.monotonic() - started < 5, "refusing a config must not take long"
    message = str(caught.value)
    assert "\n" not in message and len(message) < SHORT_LINE, message[:SHORT_LINE]
    return message.replace(str(path), "<file>")  # the test's folder is named after the test


# ---------------------------------------------------------------------------------------------- structure
def test_deeply_nested_yaml_is_one_line_not_a_recursion_error(tmp_path: Path) -> None:
    message = _error(tmp_path, "env:\n  kwargs: " + "[" * 5000 + "]" * 5000 + "\n")
    assert "<file> line 2" in message and "nested" in message


def test_deeply_nested_block_mappings_are_refused_too(tmp_path: Path) -> None:
    text = "".join(f"{' ' * depth}k{depth}:\n" for depth in range(1000)) + " " * 1000 + "leaf: 1\n"
    assert "nested more than" in _error(tmp_path, text)


def test_alias_bomb_under_env_kwargs_is_refused_before_it_expands(tmp_path: Path) -> None:
    """Typed dict[str, Any], env.kwargs validates anything: the alias is refused while reading."""
    message = _error(tmp_path, "env:\n  kwargs:\n" + _alias_bomb(9, indent="    "))
    assert "alias" in message and "line 4" in message


def test_alias_bomb_in_a_typed_field_is_refused_with_a_short_line(tmp_path: Path) -> None:
    message = _error(tmp_path, _alias_bomb(6) + "seed: *l5\n")
    assert "alias" in message


def test_a_single_alias_is_refused(tmp_path: Path) -> None:
    message = _error(tmp_path, "model:\n  policy_hidden_sizes: &sizes [64, 64]\n  critic_hidden_sizes: *sizes\n")
    assert "alias *sizes" in message and "line 3" in message


def test_duplicate_keys_are_an_error_naming_the_key_and_its_lines(tmp_path: Path) -> None:
    message = _error(tmp_path, "seed: 1\nenv:\n  num_envs: 4\n  id: CartPole-v1\n  num_envs: 16\n")
    assert "duplicate key 'num_envs'" in message and "lines 3 and 5" in message


def test_duplicate_top_level_sections_are_an_error(tmp_path: Path) -> None:
    message = _error(tmp_path, "stop:\n  total_env_steps: 10\nseed: 0\nstop:\n  return_window: 3\n")
    assert "duplicate key 'stop'" in message and "lines 1 and 4" in message


def test_duplicate_keys_in_a_flow_mapping_override_are_an_error() -> None:
    with pytest.raises(ConfigError, match="duplicate key 'a'"):
        load_config(None, ["env.kwargs={a: 1, a: 2}"])


def test_an_override_with_an_alias_or_deep_nesting_is_one_error() -> None:
    for override in ("env.kwargs=*x", "env.kwargs=" + "[" * 3000 + "]" * 3000):
        with pytest.raises(ConfigError) as caught:
            load_config(None, [override])
        assert len(str(caught.value)) < SHORT_LINE


def test_an_integer_python_cannot_convert_is_one_error(tmp_path: Path) -> None:
    """Python refuses to read ints of more than 4,300 digits with a ValueError, not a YAMLError."""
    assert "invalid YAML" in _error(tmp_path, "seed: " + "7" * 5000 + "\n")
    with pytest.raises(ConfigError):
        parse_override("seed=" + "7" * 5000)


def test_an_oversized_file_is_refused_without_parsing_it(tmp_path: Path) -> None:
    message = _error(tmp_path, "env:\n  kwargs:\n    blob: '" + "x" * (2 * 1024 * 1024) + "'\n")
    assert "too large" in message


def test_a_long_value_is_echoed_cut_short(tmp_path: Path) -> None:
    message = _error(tmp_path, "seed: '" + "9" * 50_000 + "'\nruntime:\n  device: " + "t" * 50_000 + "\n")
    assert "seed" in message and "runtime.device" in message and "..." in message


def test_a_long_unknown_key_is_named_cut_short(tmp_path: Path) -> None:
    message = _error(tmp_path, "env:\n  ? " + "k" * 20_000 + "\n  : 1\n", ("env." + "q" * 20_000 + "=1",))
    assert "unknown fields" in message and "kkk" in message and "qqq" in message


def test_thousands_of_problems_are_counted_not_listed(tmp_path: Path) -> None:
    text = "env:\n" + "".join(f"  typo{index}: 1\n" for index in range(5000))
    message = _error(tmp_path, text)
    assert "typo0" in message and "more" in message


# ---------------------------------------------------------------------------------------------- strict values
@pytest.mark.parametrize(("text", "field"), [
    ("env:\n  num_envs: true\n", "env.num_envs"),
    ("seed: '3'\n", "seed"),
    ("seed: 3.0\n", "seed"),
    ("stop:\n  total_env_steps: 1.0e+18\n", "stop.total_env_steps"),
    ("stop:\n  total_env_steps: 1e32\n", "stop.total_env_steps"),
    ("stop:\n  target_return: .nan\n", "stop.target_return"),
    ("storage:\n  metrics_interval_seconds: .inf\n", "storage.metrics_interval_seconds"),
    ("algorithm:\n  learning_rate: '0.001'\n", "algorithm.learning_rate"),
    ("model:\n  policy_hidden_sizes: [64, true]\n", "model.policy_hidden_sizes.1"),
    ("model:\n  share_trunk: 1\n", "model.share_trunk"),
    ("env:\n  id: 5\n", "env.id"),
    ("stop:\n  max_wall_seconds: -.inf\n", "stop.max_wall_seconds"),
])
def test_values_a_lax_reading_would_coerce_are_errors(tmp_path: Path, text: str, field: str) -> None:
    message = _error(tmp_path, text)
    assert f"{field}:" in message


def test_overrides_from_the_command_line_are_still_typed() -> None:
    config = load_config(None, ["seed=3", "algorithm.learning_rate=1e-3", "stop.target_return=475",
                                "model.policy_hidden_sizes=[32, 32]", "storage.directory=/tmp/runs",
                                "stop.max_wall_seconds=3600", "algorithm.reward_scale=2E-1"])
    assert config.seed == 3 and type(config.seed) is int
    assert config.algorithm.learning_rate == 1e-3 and config.algorithm.reward_scale == pytest.approx(0.2)
    assert config.stop.target_return == 475.0 and type(config.stop.target_return) is float
    assert config.model.policy_hidden_sizes == (32, 32) and config.storage.directory == Path("/tmp/runs")
    for bad, field in (("env.num_envs=true", "env.num_envs"), ("seed='3'", "seed"),
                       ("stop.total_env_steps=1e32", "stop.total_env_steps"),
                       ("stop.target_return=.nan", "stop.target_return")):
        with pytest.raises(ConfigError, match=field):
            load_config(None, [bad])


def test_scientific_notation_in_a_file_is_a_number(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("algorithm:\n  learning_rate: 5e-4\n  gamma: 9.9e-1\nstop:\n  target_return: 1e3\n")
    config = load_config(path)
    assert config.algorithm.learning_rate == 5e-4 and config.algorithm.gamma == 0.99
    assert config.stop.target_return == 1000.0


def test_a_stored_config_loads_back_strictly() -> None:
    """A run file keeps the config as JSON: lists for tuples, strings for paths."""
    config = load_config(REPOSITORY_ROOT / "configs" / "ppo_cartpole.yaml", ["runtime.key_folder=/tmp/keys"])
    assert RunConfig.model_validate(config.to_json_dict()) == config


def test_every_config_under_configs_still_loads() -> None:
    for path in sorted((REPOSITORY_ROOT / "configs").glob("*.yaml")):
        load_config(path, [], config_model(path))


# ---------------------------------------------------------------------------------------------- the CLI
@pytest.mark.parametrize("text", [
    "env:\n  kwargs: " + "[" * 20_000 + "]" * 20_000 + "\n",
    "env:\n  kwargs:\n" + _alias_bomb(9, indent="    "),
    _alias_bomb(9) + "seed: *l8\n",
    "seed: 1\nseed: 2\n",
], ids=["deep", "bomb-in-kwargs", "bomb-in-seed", "duplicate"])
@pytest.mark.parametrize("command", [["train"], ["config", "show"], ["evolve"]])
def test_hostile_files_through_the_command_line_end_in_one_line(tmp_path: Path, text: str,
                                                                 command: list[str]) -> None:
    path = tmp_path / "hostile.yaml"
    path.write_text(text)
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "lamarckian_hpc", *command, str(path)], capture_output=True,
                            text=True, timeout=60, cwd=tmp_path)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-2000:]
    assert lines[0].startswith("config error") and len(lines[0]) < SHORT_LINE
    assert "Traceback" not in result.stderr and time.monotonic() - started < 30
