"""Config loading: defaults, YAML plus typed `key.path=value` overrides, and the one-line errors the
CLI gives for every kind of malformed config, checked through a real subprocess of the CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from lamarckian_hpc.config import ConfigError, RunConfig, build_config, load_config, parse_override

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
CARTPOLE_CONFIG = REPOSITORY_ROOT / "configs" / "ppo_cartpole.yaml"
CLI_TIMEOUT_SECONDS = 60
USAGE_ERROR = 2


# ---------------------------------------------------------------------------------------------- in process
def test_defaults_load_and_match_the_declared_fields() -> None:
    config = load_config(None)
    assert config == RunConfig()
    assert config.seed == 0
    assert config.env.id == "CartPole-v1"
    assert config.env.num_envs == 8
    assert config.model.policy_hidden_sizes == (256, 128)
    assert config.algorithm.clip_range == pytest.approx(0.2)
    assert config.algorithm.minibatch_size == config.algorithm.batch_size // config.algorithm.num_minibatches
    assert config.runtime.device == "auto"
    assert config.storage.directory == Path("runs")
    assert config.stop.target_return is None


def test_yaml_file_and_overrides_are_typed() -> None:
    config = load_config(
        CARTPOLE_CONFIG,
        ["seed=3", "algorithm.learning_rate=0.001", "model.policy_hidden_sizes=[32,32]", "stop.target_return=null"],
    )
    assert config.seed == 3 and type(config.seed) is int
    assert config.algorithm.learning_rate == pytest.approx(0.001) and type(config.algorithm.learning_rate) is float
    assert config.model.policy_hidden_sizes == (32, 32)
    assert all(type(size) is int for size in config.model.policy_hidden_sizes)
    assert config.stop.target_return is None  # the file says 475
    # Fields the overrides did not touch keep the file's values, and derived fields follow them.
    assert config.env.num_envs == 8
    assert config.model.activation == "tanh"
    assert config.model.critic_hidden_sizes == ()
    assert config.algorithm.batch_size == 512
    assert config.algorithm.minibatch_size == 256
    assert config.stop.total_env_steps == 300_000


def test_later_overrides_win_and_scientific_notation_is_a_float() -> None:
    config = load_config(None, ["seed=1", "seed=5", "algorithm.learning_rate=1e-3"])
    assert config.seed == 5
    assert config.algorithm.learning_rate == pytest.approx(1e-3)


def test_parse_override_reads_values_as_yaml() -> None:
    assert parse_override("a.b=3") == ("a.b", 3)
    assert parse_override("a=0.5") == ("a", 0.5)
    assert parse_override("a=true") == ("a", True)
    assert parse_override("a=[1, 2]") == ("a", [1, 2])
    assert parse_override("a=null") == ("a", None)
    assert parse_override("a=text") == ("a", "text")
    assert parse_override("a=x=y") == ("a", "x=y")
    with pytest.raises(ConfigError, match="key.path=value"):
        parse_override("nokeyvalue")


def test_config_is_frozen() -> None:
    config = load_config(None)
    with pytest.raises(ValidationError):
        config.seed = 4  # type: ignore[misc]


def test_layer_sizes_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="policy_hidden_sizes"):
        load_config(None, ["model.policy_hidden_sizes=[32,0]"])


def test_more_minibatches_than_batch_is_rejected() -> None:
    with pytest.raises(ConfigError, match="num_minibatches"):
        load_config(None, ["algorithm.batch_size=4", "algorithm.num_minibatches=8"])


def test_stored_config_loads_back() -> None:
    config = load_config(CARTPOLE_CONFIG, ["seed=3"])
    assert build_config(config.to_json_dict(), "stored") == config


# ---------------------------------------------------------------------------------------------- through the CLI
def run_train(arguments: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lamarckian_hpc", "train", *arguments],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_SECONDS,
    )


def assert_one_line_config_error(result: subprocess.CompletedProcess[str], cwd: Path) -> str:
    """Exit 2, exactly one non-empty stderr line that says "config error", no traceback, no run file."""
    assert result.returncode == USAGE_ERROR, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].strip(), result.stderr
    assert "config error" in lines[0]
    assert "Traceback" not in result.stderr + result.stdout
    assert not (cwd / "runs").exists()
    return lines[0]


@pytest.fixture
def empty_config(tmp_path: Path) -> Path:
    path = tmp_path / "empty.yaml"
    path.write_text("# every field at its default\n")
    return path


def test_cli_unknown_key_in_yaml(tmp_path: Path) -> None:
    path = tmp_path / "typo.yaml"
    path.write_text("seed: 1\nalgorithm:\n  clip_rnage: 0.2\n")
    line = assert_one_line_config_error(run_train([str(path)], tmp_path), tmp_path)
    assert "algorithm.clip_rnage" in line
    assert "clip_range" in line.split("algorithm.clip_rnage", 1)[1]  # listed among the allowed fields
    assert "learning_rate" in line


def test_cli_unknown_top_level_section(tmp_path: Path, empty_config: Path) -> None:
    line = assert_one_line_config_error(run_train([str(empty_config), "algorithmm.clip_range=0.1"], tmp_path), tmp_path)
    assert "algorithmm" in line
    assert "algorithm" in line.split("algorithmm", 1)[1]


def test_cli_wrong_type(tmp_path: Path, empty_config: Path) -> None:
    line = assert_one_line_config_error(run_train([str(empty_config), "seed=abc"], tmp_path), tmp_path)
    assert "seed" in line
    assert "integer" in line
    assert "abc" in line


def test_cli_out_of_range(tmp_path: Path, empty_config: Path) -> None:
    line = assert_one_line_config_error(run_train([str(empty_config), "algorithm.clip_range=1.5"], tmp_path), tmp_path)
    assert "algorithm.clip_range" in line
    assert "less than 1" in line
    assert "1.5" in line


def test_cli_missing_file(tmp_path: Path) -> None:
    line = assert_one_line_config_error(run_train(["no_such_config.yaml"], tmp_path), tmp_path)
    assert "no_such_config.yaml" in line
    assert "not found" in line


def test_cli_bad_yaml(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("seed: 1\nmodel:\n  policy_hidden_sizes: [64, 64\n")
    line = assert_one_line_config_error(run_train([str(path)], tmp_path), tmp_path)
    assert "broken.yaml" in line
    assert "YAML" in line


def test_cli_yaml_that_is_not_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "list.yaml"
    path.write_text("- seed\n- 1\n")
    line = assert_one_line_config_error(run_train([str(path)], tmp_path), tmp_path)
    assert "list.yaml" in line
    assert "mapping" in line


def test_cli_config_file_that_is_not_text(tmp_path: Path) -> None:
    path = tmp_path / "binary.yaml"
    path.write_bytes(b"\xff\xfe\x00seed: 1\n")
    line = assert_one_line_config_error(run_train([str(path)], tmp_path), tmp_path)
    assert "binary.yaml" in line


def test_cli_override_without_equals(tmp_path: Path, empty_config: Path) -> None:
    line = assert_one_line_config_error(run_train([str(empty_config), "nokeyvalue"], tmp_path), tmp_path)
    assert "nokeyvalue" in line
    assert "key.path=value" in line


def test_cli_override_with_empty_path_segment(tmp_path: Path, empty_config: Path) -> None:
    line = assert_one_line_config_error(run_train([str(empty_config), "algorithm..clip_range=0.1"], tmp_path), tmp_path)
    assert "algorithm..clip_range" in line


def test_cli_override_into_a_value_set_by_the_file(tmp_path: Path) -> None:
    line = assert_one_line_config_error(run_train([str(CARTPOLE_CONFIG), "seed.x=1"], tmp_path), tmp_path)
    assert "seed.x" in line
    assert "not a section" in line


def test_cli_override_into_a_default_value(tmp_path: Path, empty_config: Path) -> None:
    line = assert_one_line_config_error(run_train([str(empty_config), "seed.x=1"], tmp_path), tmp_path)
    assert "seed" in line


def test_cli_wrong_literal_choice_names_the_allowed_values(tmp_path: Path, empty_config: Path) -> None:
    line = assert_one_line_config_error(run_train([str(empty_config), "runtime.device=tpu"], tmp_path), tmp_path)
    assert "runtime.device" in line
    assert "tpu" in line
    for choice in ("'auto'", "'cpu'", "'cuda'"):
        assert choice in line


def test_cli_reports_every_problem_on_the_same_line(tmp_path: Path, empty_config: Path) -> None:
    result = run_train([str(empty_config), "runtime.device=tpu", "seed=-1", "env.num_envs=0"], tmp_path)
    line = assert_one_line_config_error(result, tmp_path)
    for field in ("runtime.device", "seed", "env.num_envs"):
        assert field in line
