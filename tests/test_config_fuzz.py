"""Malformed configs, generated: whatever a user writes, loading it either succeeds or ends in one
ConfigError line; never another exception, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import yaml
from fuzz_budget import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from lamarckian_hpc.config import ALGORITHMS, ConfigError, EvolveConfig, RunConfig, build_config, load_config
from lamarckian_hpc.config.evorl import config_model


def _known_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    paths = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            paths += _known_paths(annotation, f"{prefix}{name}.")
        else:
            paths.append(f"{prefix}{name}")
    return paths


PATHS = sorted({*_known_paths(RunConfig), *_known_paths(EvolveConfig),
                *(f"algorithm.{path}" for model in ALGORITHMS.values() for path in _known_paths(model))})

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=True),
                    st.text(max_size=20), st.sampled_from(["ppo", "nsga2", "ga", "cuda", "tree", "curve", "1e9"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                         st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                      max_leaves=8)
paths = st.one_of(st.sampled_from(PATHS), st.text(min_size=1, max_size=30))


def _tree(assignments: list[tuple[str, object]]) -> dict:
    tree: dict = {}
    for dotted, value in assignments:
        node = tree
        keys = dotted.split(".")
        for key in keys[:-1]:
            child = node.get(key)
            if not isinstance(child, dict):
                child = node[key] = {}
            node = child
        node[keys[-1]] = value
    return tree


@settings(max_examples=examples(250), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(paths, values), max_size=6), st.sampled_from([RunConfig, EvolveConfig]))
def test_any_config_tree_loads_or_fails_with_one_config_error(assignments, model):
    try:
        build_config(_tree(assignments), "fuzz", model)
    except ConfigError as error:
        message = str(error)
        assert message.startswith("config error") and "\n" not in message


@settings(max_examples=examples(150), deadline=None)
@given(st.text(max_size=200))
def test_any_yaml_text_loads_or_fails_with_one_config_error(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("fuzz") / "config.yaml"
    path.write_text(text)
    try:
        load_config(path)
    except ConfigError as error:
        assert "\n" not in str(error)


@settings(max_examples=examples(150), deadline=None)
@given(st.lists(st.text(max_size=40), max_size=4))
def test_any_overrides_load_or_fail_with_one_config_error(overrides):
    try:
        load_config(None, overrides)
    except ConfigError as error:
        assert "\n" not in str(error)


def _loads_or_one_config_error(path) -> None:
    """What `config show` does: pick the model from the file, then load it."""
    try:
        load_config(path, [], config_model(path))
    except ConfigError as error:
        message = str(error)
        assert message.startswith("config error") and "\n" not in message and len(message) < 2000, message[:2000]


yaml_scalars = st.one_of(scalars, st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**30, 10**30),
                         st.dates(), st.binary(max_size=8))
yaml_trees = st.recursive(yaml_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.one_of(st.text(max_size=8), st.integers(), st.booleans()), inner,
                                                 max_size=4)), max_leaves=12)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(paths, yaml_trees), max_size=5), st.sampled_from([None, True, False]))
def test_random_yaml_trees_load_or_fail_with_one_config_error(tmp_path_factory, assignments, flow_style):
    """Random trees at known and unknown paths, written as YAML (block or flow style)."""
    path = tmp_path_factory.mktemp("fuzz") / "config.yaml"
    path.write_text(yaml.safe_dump(_tree(assignments), default_flow_style=flow_style, allow_unicode=True))
    _loads_or_one_config_error(path)


#: Pieces of YAML syntax, including what the loader refuses (aliases, merges, tags Python cannot
#: build, deep brackets), strung together at random.
YAML_PIECES = ["seed: ", "env:\n  ", "kwargs: ", "num_envs: ", "algorithm: ", "name: ", "ppo", "nsga2", "pbt",
               "&a ", "*a", "<<: ", "!!python/object:os.system ", "!!binary ", "!!timestamp ", "!!int ", "!!float ",
               "!!set ", "!!omap ", "? ", ": ", "- ", "[", "]", "{", "}", ", ", "\n", "  ", "'", '"', "#",
               "1e32", ".nan", "-.inf", "0x1F", "0o17", "1_000", "2020-01-01", "yes", "~", "null", "true",
               "7" * 5000, "[" * 300, "]" * 300, "---\n", "...\n", "%YAML 1.1\n", "\t", "\x00", "\ufeff"]


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.sampled_from(YAML_PIECES), st.text(max_size=6)), max_size=30))
def test_yaml_built_from_syntax_pieces_loads_or_fails_with_one_config_error(tmp_path_factory, pieces):
    path = tmp_path_factory.mktemp("fuzz") / "config.yaml"
    path.write_text("".join(pieces), encoding="utf-8", errors="surrogatepass")
    _loads_or_one_config_error(path)


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.tuples(st.sampled_from(PATHS), st.sampled_from(YAML_PIECES + ["3", "0.5", "[1, 2]", "{a: 1}"])),
                max_size=4))
def test_overrides_made_of_syntax_pieces_load_or_fail_with_one_config_error(assignments):
    try:
        load_config(None, [f"{key}={value}" for key, value in assignments])
    except ConfigError as error:
        assert "\n" not in str(error) and len(str(error)) < 2000


def test_generated_bad_configs_through_the_command_line_end_in_one_line(tmp_path):
    """A few generated configs through the real CLI: exit 2, one stderr line, no traceback."""
    bad = [{"env": {"num_envs": "many"}}, {"algorithm": {"name": "sac"}}, {"runtime": [1, 2]},
           {"stop": {"total_env_steps": -1e30}}, {"storage": {"directory": {"a": 1}}}, {"seed": float("nan")}]
    for index, tree in enumerate(bad):
        path = tmp_path / f"bad{index}.yaml"
        path.write_text(yaml.safe_dump(tree))
        result = subprocess.run([sys.executable, "-m", "lamarckian_hpc", "train", str(path)], capture_output=True,
                                text=True, timeout=60, cwd=tmp_path)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, (tree, result.stderr)
