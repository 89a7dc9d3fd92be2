"""Typed run configuration: the one place a run's settings are declared, bounded and explained.

A run is described by a YAML file plus `key.path=value` overrides from the command line. Everything
is validated when it is loaded, so that a typo or an out-of-range value stops the run before any
process starts, with one line that names the field and what it accepts (``ConfigError``). Nothing
here imports torch, gymnasium or the runtime: loading a config must be cheap and side-effect free.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, computed_field, model_validator


class ConfigError(ValueError):
    """A config that cannot be used; its message is one line meant for the user."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


class EnvConfig(_Section):
    id: str = Field("CartPole-v1", min_length=1, description="Gymnasium environment id.")
    num_envs: int = Field(8, ge=1, le=4096, description="Environments stepped together in one process.")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments for gymnasium.make.")
    max_episode_steps: int | None = Field(None, ge=1, description="Episode step limit (the env's own when unset).")


class ModelConfig(_Section):
    kind: Literal["mlp", "cnn"] = Field("mlp", description="mlp for vector observations, cnn for images.")
    policy_hidden_sizes: tuple[int, ...] = Field(
        (256, 128), min_length=1, description="Policy layers; the critic is built on top of them."
    )
    critic_hidden_sizes: tuple[int, ...] = Field(
        (128, 64), description="Critic layers added on top of the shared policy layers."
    )
    share_trunk: bool = Field(True, description="Critic reuses the policy layers (paper Table III).")
    activation: Literal["leaky_relu", "tanh", "relu"] = Field("leaky_relu", description="Hidden activation.")
    initial_log_std: float = Field(0.0, ge=-5, le=2, description="Initial log std of continuous actions.")

    @model_validator(mode="after")
    def _positive_sizes(self) -> ModelConfig:
        for name in ("policy_hidden_sizes", "critic_hidden_sizes"):
            if any(size < 1 for size in getattr(self, name)):
                raise ValueError(f"{name}: every layer size must be >= 1")
        return self


class PPOConfig(_Section):
    name: Literal["ppo"] = Field("ppo", description="Algorithm.")
    batch_size: int = Field(8192, ge=2, description="Env frames collected per update.")
    num_epochs: int = Field(1, ge=1, le=100, description="Passes over each batch (batch reuse).")
    num_minibatches: int = Field(4, ge=1, description="Minibatches per epoch.")
    learning_rate: float = Field(3e-4, gt=0, le=1, description="Adam step size.")
    anneal_learning_rate: bool = Field(False, description="Decay the step size linearly to 0 over the run.")
    gamma: float = Field(0.99, ge=0, le=1, description="Discount factor.")
    gae_lambda: float = Field(0.95, ge=0, le=1, description="GAE lambda.")
    reward_scale: float = Field(1.0, gt=0, description="Rewards are multiplied by this before GAE.")
    clip_range: float = Field(0.2, gt=0, lt=1, description="Probability-ratio clip of the surrogate loss.")
    policy_weight: float = Field(1.0, ge=0, description="Weight of the policy loss.")
    value_weight: float = Field(0.5, ge=0, description="Weight of the critic loss.")
    entropy_weight: float = Field(0.01, ge=0, description="Weight of the entropy bonus.")
    max_grad_norm: float = Field(0.5, gt=0, description="Gradient clipping norm.")
    normalize_advantages: bool = Field(True, description="Normalize advantages per minibatch.")

    @model_validator(mode="before")
    @classmethod
    def _accept_derived_fields(cls, data: Any) -> Any:
        """A stored config carries the derived minibatch_size; accept it back when it agrees."""
        if isinstance(data, dict) and "minibatch_size" in data:
            data = dict(data)
            given = data.pop("minibatch_size")
            derived = cls(**data).minibatch_size
            if given != derived:
                raise ValueError(f"minibatch_size is derived (batch_size // num_minibatches = {derived}), got {given}")
        return data

    @computed_field  # type: ignore[prop-decorator]
    @property
    def minibatch_size(self) -> int:
        return max(1, self.batch_size // self.num_minibatches)

    @model_validator(mode="after")
    def _minibatches_fit(self) -> PPOConfig:
        if self.num_minibatches > self.batch_size:
            raise ValueError(f"num_minibatches ({self.num_minibatches}) exceeds batch_size ({self.batch_size})")
        return self


class RuntimeConfig(_Section):
    mode: Literal["ray", "serial"] = Field(
        "ray", description="ray: a learner and actor processes on (local) Ray; serial: all in this process."
    )
    sampling: Literal["async", "sync"] = Field(
        "async", description="async: actors never wait for the learner; sync: each batch from the current policy."
    )
    num_actors: int | None = Field(None, ge=1, le=100_000, description="Actor processes; default one per core.")
    rollout_steps: int = Field(32, ge=1, description="Ticks an actor samples per message it sends.")
    max_staleness: int | None = Field(None, ge=0, description="Drop samples older than this many policy versions.")
    ray_address: str | None = Field(None, description="Join this Ray cluster; default starts a local one.")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="Learner device; auto takes a GPU if present.")
    torch_threads: int = Field(1, ge=1, le=256, description="Torch intra-op threads of the learner process.")


class StorageConfig(_Section):
    directory: Path = Field(Path("runs"), description="Folder for run files.")
    run_name: str | None = Field(None, min_length=1, description="File stem; default <config>-<time>-s<seed>.")
    metrics_interval_seconds: float = Field(5.0, gt=0, description="How often metrics are flushed to disk.")


class StopConfig(_Section):
    total_env_steps: int = Field(300_000, ge=1, description="Env frames after which training stops.")
    target_return: float | None = Field(None, description="Stop early once the recent mean return reaches this.")
    return_window: int = Field(20, ge=1, description="Episodes in the recent mean return.")


class RunConfig(_Section):
    seed: int = Field(0, ge=0, description="Seed of every random generator of the run.")
    env: EnvConfig = Field(default_factory=EnvConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    algorithm: PPOConfig = Field(default_factory=PPOConfig)
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    stop: StopConfig = Field(default_factory=StopConfig)

    def to_json_dict(self) -> dict[str, Any]:
        """The resolved config as plain JSON types (what the run file stores)."""
        return json.loads(self.model_dump_json())


def _set_path(tree: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    if any(not key for key in keys):
        raise ConfigError(f"config error: override '{dotted}': empty key in dotted path")
    node = tree
    for depth, key in enumerate(keys[:-1]):
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            where = ".".join(keys[: depth + 1])
            raise ConfigError(f"config error: override '{dotted}': {where} is a value, not a section")
        node = child
    node[keys[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """`a.b=value` -> ("a.b", value), the value read as YAML so that 3, 0.5, true and [1, 2] are typed."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"config error: override '{text}' is not of the form key.path=value")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.strip(), value


def _describe(error: dict[str, Any], section: type[BaseModel]) -> str:
    path = ".".join(str(part) for part in error["loc"]) or "<root>"
    if error["type"] == "extra_forbidden":
        parent = section
        for part in error["loc"][:-1]:
            field = parent.model_fields.get(str(part))
            annotation = getattr(field, "annotation", None)
            if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
                break
            parent = annotation
        allowed = ", ".join(parent.model_fields)
        return f"{path}: unknown field (allowed: {allowed})"
    message = error["msg"].removeprefix("Value error, ")
    got = error.get("input")
    shown = "" if isinstance(got, dict) else f" (got {got!r})"
    return f"{path}: {message}{shown}"


def build_config(tree: dict[str, Any], source: str = "config") -> RunConfig:
    """Validate a plain dict into a RunConfig, turning pydantic's report into one line."""
    try:
        return RunConfig.model_validate(tree)
    except ValidationError as error:
        problems = "; ".join(_describe(item, RunConfig) for item in error.errors())
        raise ConfigError(f"config error in {source}: {problems}") from None


def load_config(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> RunConfig:
    """Read a YAML config (or the defaults when path is None) and apply `key.path=value` overrides."""
    tree: dict[str, Any] = {}
    source = "defaults"
    if path is not None:
        source = str(path)
        file = Path(path)
        if not file.is_file():
            raise ConfigError(f"config error: file not found: {file}")
        try:
            text = file.read_text()
        except (OSError, UnicodeDecodeError) as error:
            raise ConfigError(f"config error: {file}: cannot read: {error}") from None
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f" line {mark.line + 1}" if mark is not None else ""
            problem = getattr(error, "problem", None) or "could not parse"
            raise ConfigError(f"config error: {file}{where}: invalid YAML: {problem}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"config error: {file}: top level must be a mapping, got {type(loaded).__name__}")
        tree = loaded or {}
    for text in overrides:
        key, value = parse_override(text)
        _set_path(tree, key, value)
    return build_config(tree, source)
