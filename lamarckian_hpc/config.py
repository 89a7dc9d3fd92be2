"""Typed run configuration: the one place a run's settings are declared, bounded and explained.

A run is described by a YAML file plus `key.path=value` overrides from the command line. Everything
is validated when it is loaded, so that a typo or an out-of-range value stops the run before any
process starts, with one line that names the field and what it accepts (``ConfigError``). Nothing
here imports torch, gymnasium or the runtime: loading a config must be cheap and side-effect free.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

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


class _BatchAlgorithm(_Section):
    """Fields every algorithm that learns from batches of experience shares."""

    batch_size: int = Field(8192, ge=2, description="Env frames collected per update.")
    num_epochs: int = Field(1, ge=1, le=100, description="Passes over each batch (batch reuse).")
    num_minibatches: int = Field(4, ge=1, description="Minibatches per epoch.")
    learning_rate: float = Field(3e-4, gt=0, le=1, description="Adam step size.")
    anneal_learning_rate: bool = Field(False, description="Decay the step size linearly to 0 over the run.")
    gamma: float = Field(0.99, ge=0, le=1, description="Discount factor.")
    reward_scale: float = Field(1.0, gt=0, description="Rewards are multiplied by this before learning.")
    value_weight: float = Field(0.5, ge=0, description="Weight of the critic loss.")
    entropy_weight: float = Field(0.01, ge=0, description="Weight of the entropy bonus.")
    max_grad_norm: float = Field(0.5, gt=0, description="Gradient clipping norm.")

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
    def _minibatches_fit(self) -> _BatchAlgorithm:
        if self.num_minibatches > self.batch_size:
            raise ValueError(f"num_minibatches ({self.num_minibatches}) exceeds batch_size ({self.batch_size})")
        return self


class PPOConfig(_BatchAlgorithm):
    name: Literal["ppo"] = Field("ppo", description="Algorithm: ppo, impala, a3c or dqn.")
    gae_lambda: float = Field(0.95, ge=0, le=1, description="GAE lambda.")
    clip_range: float = Field(0.2, gt=0, lt=1, description="Probability-ratio clip of the surrogate loss.")
    policy_weight: float = Field(1.0, ge=0, description="Weight of the policy loss.")
    normalize_advantages: bool = Field(True, description="Normalize advantages per minibatch.")


class ImpalaConfig(_BatchAlgorithm):
    name: Literal["impala"] = "impala"
    rho_bar: float = Field(1.0, gt=0, description="V-trace clip of the importance weight in the targets.")
    c_bar: float = Field(1.0, gt=0, description="V-trace clip of the trace-cutting coefficients.")
    policy_weight: float = Field(1.0, ge=0, description="Weight of the policy loss.")


class A3CConfig(_Section):
    name: Literal["a3c"] = "a3c"
    learning_rate: float = Field(1e-3, gt=0, le=1, description="Adam step size of the learner.")
    gamma: float = Field(0.99, ge=0, le=1, description="Discount factor.")
    gae_lambda: float = Field(0.95, ge=0, le=1, description="GAE lambda of the actors' advantage estimates.")
    reward_scale: float = Field(1.0, gt=0, description="Rewards are multiplied by this before learning.")
    value_weight: float = Field(0.5, ge=0, description="Weight of the critic loss.")
    entropy_weight: float = Field(0.01, ge=0, description="Weight of the entropy bonus.")
    max_grad_norm: float = Field(0.5, gt=0, description="Gradient clipping norm (actor side).")
    max_gradient_staleness: int = Field(4, ge=0, description="Gradients from older weights are dropped.")


class DQNConfig(_Section):
    name: Literal["dqn"] = "dqn"
    learning_rate: float = Field(5e-4, gt=0, le=1, description="Adam step size.")
    gamma: float = Field(0.99, ge=0, le=1, description="Discount factor.")
    reward_scale: float = Field(1.0, gt=0, description="Rewards are multiplied by this before learning.")
    replay_capacity: int = Field(100_000, ge=100, description="Transitions kept in the replay buffer.")
    learning_starts: int = Field(2_000, ge=1, description="Transitions in the buffer before learning starts.")
    minibatch_size: int = Field(128, ge=1, description="Transitions per gradient step.")
    updates_per_frame: float = Field(0.25, gt=0, le=16, description="Gradient steps per new env frame.")
    target_update_interval: int = Field(500, ge=1, description="Gradient steps between target-network copies.")
    epsilon_start: float = Field(1.0, ge=0, le=1, description="Exploration rate at the start.")
    epsilon_end: float = Field(0.02, ge=0, le=1, description="Exploration rate after the decay.")
    epsilon_decay_frames: int = Field(20_000, ge=1, description="Env frames over which epsilon decays linearly.")
    double_q: bool = Field(True, description="Double DQN targets.")
    max_grad_norm: float = Field(10.0, gt=0, description="Gradient clipping norm.")


AlgorithmConfig = Annotated[PPOConfig | ImpalaConfig | A3CConfig | DQNConfig, Field(discriminator="name")]
ALGORITHMS: dict[str, type[BaseModel]] = {"ppo": PPOConfig, "impala": ImpalaConfig, "a3c": A3CConfig,
                                          "dqn": DQNConfig}


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
    max_wall_seconds: float | None = Field(None, gt=0, description="Stop after this much training wall time.")


class RunConfig(_Section):
    seed: int = Field(0, ge=0, description="Seed of every random generator of the run.")
    env: EnvConfig = Field(default_factory=EnvConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    algorithm: AlgorithmConfig = Field(default_factory=PPOConfig)
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    stop: StopConfig = Field(default_factory=StopConfig)

    @model_validator(mode="before")
    @classmethod
    def _default_algorithm(cls, data: Any) -> Any:
        """An algorithm section without a name is PPO's (the discriminated union needs the tag)."""
        if isinstance(data, dict) and isinstance(data.get("algorithm"), dict) and "name" not in data["algorithm"]:
            data = {**data, "algorithm": {"name": "ppo", **data["algorithm"]}}
        return data

    def to_json_dict(self) -> dict[str, Any]:
        """The resolved config as plain JSON types (what the run file stores)."""
        return json.loads(self.model_dump_json())


class ProblemConfig(_Section):
    name: Literal["zdt1", "zdt2", "zdt3", "dtlz2"] = Field("zdt1", description="Test problem.")
    num_variables: int | None = Field(None, ge=2, description="Decision variables; default the problem's own.")
    evaluation_delay_seconds: float = Field(0.0, ge=0, le=60, description="Extra time per evaluation (tests).")


class NSGA2Config(_Section):
    name: Literal["nsga2"] = Field("nsga2", description="EC algorithm.")
    population_size: int = Field(100, ge=2, description="Individuals per generation (even).")
    generations: int = Field(200, ge=1, description="Generations, the random initial one included.")
    crossover_eta: float = Field(15.0, gt=0, description="SBX distribution index.")
    crossover_probability: float = Field(0.9, ge=0, le=1, description="Chance a pair is crossed.")
    mutation_eta: float = Field(20.0, gt=0, description="Polynomial mutation distribution index.")

    @model_validator(mode="after")
    def _even_population(self) -> NSGA2Config:
        if self.population_size % 2:
            raise ValueError(f"population_size must be even, got {self.population_size}")
        return self


class EvolveRuntimeConfig(_Section):
    mode: Literal["ray", "serial"] = Field("ray", description="ray: evaluations on Ray workers; serial: here.")
    num_workers: int | None = Field(None, ge=1, description="Concurrent evaluations; default one per core.")
    ray_address: str | None = Field(None, description="Join this Ray cluster; default starts a local one.")
    evaluation_timeout_seconds: float = Field(600.0, gt=0, description="An evaluation slower than this fails.")


class EvolveConfig(_Section):
    """A run of `lamarckian-hpc evolve`: an EC algorithm on a problem, evaluated asynchronously."""

    seed: int = Field(0, ge=0, description="Seed of every random generator of the run.")
    problem: ProblemConfig = Field(default_factory=ProblemConfig)
    algorithm: NSGA2Config = Field(default_factory=NSGA2Config)
    runtime: EvolveRuntimeConfig = Field(default_factory=EvolveRuntimeConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)

    def to_json_dict(self) -> dict[str, Any]:
        return json.loads(self.model_dump_json())


ConfigT = TypeVar("ConfigT", bound=BaseModel)


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


def _without_union_tags(loc: tuple[Any, ...]) -> list[Any]:
    """pydantic puts the chosen algorithm's tag in error paths (algorithm.ppo.x); users wrote algorithm.x."""
    parts = list(loc)
    if len(parts) >= 2 and parts[0] == "algorithm" and parts[1] in ALGORITHMS:
        del parts[1]
    return parts


def _section_of(loc: tuple[Any, ...], root: type[BaseModel]) -> type[BaseModel]:
    """The model that holds the last field of an error path."""
    parent = root
    parts = list(loc[:-1])
    while parts:
        part = str(parts.pop(0))
        if parent is RunConfig and part == "algorithm":  # the discriminated union of algorithms
            parent = ALGORITHMS.get(str(parts.pop(0)) if parts and parts[0] in ALGORITHMS else "ppo", PPOConfig)
            continue
        annotation = getattr(parent.model_fields.get(part), "annotation", None)
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            break
        parent = annotation
    return parent


def _describe(errors: list[dict[str, Any]], root: type[BaseModel]) -> str:
    """One clause per problem; unknown fields of one section are named together."""
    clauses: list[str] = []
    unknown: dict[str, tuple[list[str], type[BaseModel]]] = {}
    for error in errors:
        parts = [str(part) for part in _without_union_tags(error["loc"])]
        path = ".".join(parts) or "<root>"
        if error["type"] == "extra_forbidden":
            section = ".".join(parts[:-1])
            names, model = unknown.setdefault(section, ([], _section_of(error["loc"], root)))
            names.append(path)
            continue
        message = error["msg"].removeprefix("Value error, ")
        got = error.get("input")
        shown = "" if isinstance(got, dict) else f" (got {got!r})"
        clauses.append(f"{path}: {message}{shown}")
    for names, model in unknown.values():
        field = "unknown field" if len(names) == 1 else "unknown fields"
        clauses.append(f"{', '.join(names)}: {field} (allowed: {', '.join(model.model_fields)})")
    return "; ".join(clauses)


def build_config(tree: dict[str, Any], source: str = "config", model: type[ConfigT] = RunConfig) -> ConfigT:  # type: ignore[assignment]
    """Validate a plain dict into `model` (a run by default), turning pydantic's report into one line."""
    try:
        return model.model_validate(tree)
    except ValidationError as error:
        problems = _describe(error.errors(), model)
        raise ConfigError(f"config error in {source}: {problems}") from None


def load_config(path: str | Path | None, overrides: list[str] | tuple[str, ...] = (),
                model: type[ConfigT] = RunConfig) -> ConfigT:  # type: ignore[assignment]
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
    return build_config(tree, source, model)
