"""The configuration reference of the documentation, generated from the config models themselves.

A reference written by hand drifts: a field gets added, a bound tightened, a default changed, and
the page keeps the old text. Generating it from the pydantic models (types, defaults, bounds and
descriptions as the loader enforces them) keeps the two the same, and tests/test_docs.py fails
when the committed page is not what this module writes:

    python -m lamarckian_hpc.docs_reference > docs/reference/configuration.md

Every example is validated against the model it documents before it is written, so that a reader
can paste any of them. Constraints that only a validator knows (an even population, low below
high) and the few descriptions the models lack are kept in the tables below, by `Model.field`.
"""

from __future__ import annotations

import ast
import enum
import shlex
import sys
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import annotated_types
import yaml
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from .config.base import ConfigError
from .config.launch import ActorJobConfig, LaunchConfig
from .config.loading import apply_overrides
from .config.multiagent import LeagueConfig
from .config.programs import EVOLUTION, POPULATION_PROGRAMS
from .config.train import RunConfig

#: Constraints that validators check rather than field bounds.
CONSTRAINTS: dict[str, str] = {
    "ModelConfig.policy_hidden_sizes": "each >= 1", "ModelConfig.critic_hidden_sizes": "each >= 1",
    "_BatchAlgorithm.num_minibatches": "<= batch_size",
    "RuntimeConfig.on_node_loss": "continue needs sampling=async",
    "ProblemConfig.num_variables": "not for balance; dtlz: >= num_objectives",
    "ProblemConfig.num_objectives": "dtlz problems only", "ProblemConfig.game_data": "balance only",
    "NSGA2Config.population_size": "even", "GAConfig.elite_count": "< population_size",
    "GAConfig.crossover": "fits the problem's coding", "GAConfig.mutation": "fits the problem's coding",
    "ESConfig.population_size": "even",
    "HyperparameterRange.high": "> low", "HyperparameterRange.log": "needs low > 0",
    "HyperparameterRange.initial_low": ">= low, <= initial_high", "HyperparameterRange.initial_high": "<= high",
    "PBTAlgorithmConfig.perturb_factors": "each > 0",
    "EMOGIAlgorithmConfig.population_size": "even", "EMOGIAlgorithmConfig.weight_bounds": "low < high",
    "MultiAgentConfig.policies": "unique; letters, digits, _ or -", "MultiAgentConfig.policies_to_train": "each one of policies",
    "MultiAgentConfig.centralized_critic": "needs a trained policy",
    "MultiAgentConfig.mapping": "random, round_robin, a map to policies, or module:function",
    "LeagueConfig.capacity": "> main_agents + main_exploiters + league_exploiters",
}

#: Preferred example values; a field without one gets a value derived from its type and default.
EXAMPLES: dict[str, Any] = {
    "EnvConfig.id": "Pendulum-v1", "EnvConfig.kwargs": {"max_episode_steps": 200}, "EnvConfig.num_envs": 16,
    "EnvConfig.max_episode_steps": 500, "ModelConfig.policy_hidden_sizes": [64, 64],
    "ModelConfig.critic_hidden_sizes": [], "RuntimeConfig.num_actors": 4, "RuntimeConfig.max_policy_lag": 4, "RuntimeConfig.simulated_nodes": 4,
    "RuntimeConfig.key_folder": "/shared/job-keys",
    "RuntimeConfig.bind_address": "10.1.2.3", "StorageConfig.directory": "/scratch/runs",
    "StorageConfig.run_name": "cartpole-lr3e-4", "StopConfig.target_return": 475,
    "WandbConfig.project": "cartpole", "WandbConfig.entity": "my-team", "WandbConfig.mode": "offline",
    "WandbConfig.directory": "/scratch/wandb", "WandbConfig.group": "lr-study",
    "MlflowConfig.tracking_uri": "http://mlflow.example:5000", "MlflowConfig.experiment": "cartpole",
    "StopConfig.max_wall_seconds": 3600, "PBTStopConfig.target_return": 475, "ProblemConfig.name": "dtlz2",
    "ProblemConfig.num_variables": 12, "ProblemConfig.num_objectives": 4, "ProblemConfig.game_data": "my_game",
    "GAConfig.crossover": "one_point", "GameConfig.data": "my_game", "GameConfig.planted_bugs": ["stuck_battle"],
    "PBTAlgorithmConfig.perturb_factors": [0.5, 2.0],
    "PBTAlgorithmConfig.hyperparameters": {"learning_rate": {"low": 1e-05, "high": 0.1, "log": True}},
    "HyperparameterRange.low": 1e-04, "HyperparameterRange.initial_low": 1e-04,
    "HyperparameterRange.initial_high": 1e-03, "PBTStopConfig.max_wall_seconds": 3600,
    "EMOGIAlgorithmConfig.weight_bounds": [0.0, 2.0], "MultiAgentConfig.policies": ("left", "right"),
    "MultiAgentConfig.policies_to_train": ("left",), "MultiAgentConfig.shared_layers": 1,
    "MultiAgentConfig.mapping": {"agent_0": "left", "agent_1": "right", "agent_2": "right"},
    "LaunchConfig.account": "my-project", "LaunchConfig.time": "02:00:00",
    "LaunchConfig.exclude": "node[07-09]", "LaunchConfig.constraint": "avx512", "LaunchConfig.job_name": "cartpole",
    "LaunchConfig.folder": "/scratch/slurm-jobs", "LaunchConfig.wait_timeout_seconds": 86400,
    "LaunchConfig.partition": "gpu", "LaunchConfig.actor_jobs": 4,
    "ActorJobConfig.partition": "cpu", "ActorJobConfig.account": "my-project", "ActorJobConfig.time": "04:00:00",
    "ActorJobConfig.nodes": 16, "ActorJobConfig.cpus_per_node": 64, "ActorJobConfig.folder": "/scratch/slurm-jobs",
    "RuntimeConfig.join_folder": "runs/cartpole.join", "RuntimeConfig.planned_actors": 1024,
}
for _section in ("RuntimeConfig", "EvolveRuntimeConfig", "PBTRuntimeConfig", "EMOGIRuntimeConfig"):
    EXAMPLES[f"{_section}.ray_address"], EXAMPLES[f"{_section}.num_workers"] = "10.0.0.1:6379", 4

#: Sibling values an example needs to be valid.
CONTEXT: dict[str, dict[str, Any]] = {
    "ProblemConfig.num_objectives": {"name": "dtlz2"}, "ProblemConfig.game_data": {"name": "balance"},
    "MultiAgentConfig.policies_to_train": {"policies": ("left", "right")},
    "MultiAgentConfig.mapping": {"policies": ("left", "right")},
}
#: Overrides the examples of an optional section need (a multiagent section needs a PettingZoo env).
SECTION_CONTEXT: dict[str, tuple[str, ...]] = {"multiagent": ("env.id=pettingzoo:mpe2.simple_spread_v3",)}

#: Other sections an algorithm's examples need (the GA solves single-objective problems only).
UNION_CONTEXT: dict[str, tuple[str, ...]] = {"GAConfig": ("problem.name=rastrigin",), "ESConfig": ("problem.name=sphere",),
                                             "CMAESConfig": ("problem.name=sphere",)}


@dataclass(frozen=True)
class Root:
    """A config that a command or a class reads, and how its fields are written: `override`
    (key=value), `option` (--flag value, `options` maps field to flag) or `keyword` (Model(key=value));
    flat models (`prefix`) are one table each, under the same heading."""

    title: str
    model: type[BaseModel]
    intro: str
    style: str = "override"
    prefix: str = ""
    options: dict[str, str] | None = None
    more: tuple[tuple[type[BaseModel], str], ...] = ()


@dataclass(frozen=True)
class Place:
    """Where a model's fields sit: the dotted stem, the overrides each example needs first, and,
    for a section inside a mapping, the entry (key, values) an example shows whole."""

    stem: str
    context: tuple[str, ...] = ()
    entry: tuple[str, dict[str, Any]] | None = None


def _lookup(model: type[BaseModel], name: str, table: dict[str, Any], fallback: Any = None) -> Any:
    """A table entry for a field, along the model's bases (shared fields live on the base)."""
    for base in model.__mro__:
        if f"{base.__name__}.{name}" in table:
            return table[f"{base.__name__}.{name}"]
    return fallback


def _flow(value: Any, spaced: bool = True) -> str:
    """A value as YAML flow text, the form overrides are read in."""
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, (list, tuple)):
        return "[" + (", " if spaced else ",").join(_flow(item, spaced) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {_flow(item, spaced)}" for key, item in value.items()) + "}"
    text = str(value) if isinstance(value, Path) else value
    return yaml.safe_dump(text, default_flow_style=True).strip().removesuffix("...").strip()


def _type(annotation: Any) -> tuple[str, list[Any]]:
    """A type name a reader of YAML knows (`int or null`, `list of str`) rather than Python's
    spelling, and the values a choice type allows (Literal or Enum), which are its real bounds."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        present = [arg for arg in args if arg is not type(None)]
        names, choices = zip(*(_type(arg) for arg in present))
        text = " or ".join(names)
        return (f"{text} or null" if len(present) < len(args) else text), [c for group in choices for c in group]
    if origin is typing.Literal:
        return type(args[0]).__name__, list(args)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "str", [member.value for member in annotation]
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis or origin in (list, set, frozenset):
        inner, choices = _type(args[0])
        return f"list of {inner}", choices
    if origin is tuple:
        inner = {_type(arg)[0] for arg in args}
        return (f"list of {len(args)} {inner.pop()}s" if len(inner) == 1 else "list"), []
    if origin is dict:
        key, value = (_type(arg) for arg in args)
        return f"mapping of {key[0]} to {value[0]}", key[1]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "section", []
    names = {int: "int", float: "float", str: "str", bool: "bool", Path: "path", Any: "any"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation))), []


def _bounds(model: type[BaseModel], name: str) -> str:
    """What the loader accepts, read from pydantic's metadata so that it cannot disagree with it."""
    field = model.model_fields[name]
    text, choices = _type(field.annotation)
    parts = []
    for item in field.metadata:
        for attribute, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            if isinstance(item, getattr(annotated_types, attribute.capitalize())):
                parts.append(f"{sign} {getattr(item, attribute)}")
        if isinstance(item, annotated_types.MinLen):
            parts.append("non-empty" if item.min_length == 1 else f"at least {item.min_length} items")
        if isinstance(item, annotated_types.MaxLen):
            parts.append(f"at most {item.max_length} items")
    groups = [", ".join(f"`{part}`" for part in parts)]
    if choices:
        kind = "keys: one of" if text.startswith("mapping") else "each one of" if text.startswith("list") else \
            "only" if len(choices) == 1 else "one of"
        groups.insert(0, f"{kind} " + ", ".join(f"`{_flow(choice)}`" for choice in choices))
    if _lookup(model, name, CONSTRAINTS):
        groups.append(f"`{_lookup(model, name, CONSTRAINTS)}`")
    return "; ".join(group for group in groups if group)


def _text(text: str) -> str:
    """Prose in a table cell: pipes would end the cell and <name> would read as an HTML tag."""
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _candidates(annotation: Any, default: Any, bounds: list[Any]) -> list[Any]:
    """Values worth showing: a choice other than the default, the opposite of a flag, or a number
    near the default; the first that validates is used."""
    kind, choices = _type(annotation)
    if choices:
        return [choice for choice in choices if choice != default]
    if kind.startswith("bool"):
        return [not default]
    low = next((value for item in bounds if (value := getattr(item, "ge", None) or getattr(item, "gt", None))), None)
    if kind.startswith("int"):
        return [value for value in (default * 2 if default else None, (default or 0) + 1, low, 4) if value is not None]
    if kind.startswith("float"):
        near = ((default or 0) * 2, 1 - (1 - (default or 0)) / 2, (default or 0) / 2, 0.5, 1.0, 10.0, low)
        return [round(value, 6) for value in near if value]
    return []


def validates(root: Root, text: str) -> bool:
    """Whether an example of `root` loads as written (tests/test_docs.py checks every one)."""
    try:
        if root.style == "override":
            apply_overrides({}, shlex.split(text), "example", root.model)
        elif root.style == "option":
            from .cluster.command import ACTOR_JOB_FLAGS, LAUNCH_FLAGS  # each flag's type, as argparse converts it

            kinds = {flag: kind for flag, (_, kind, _) in {**LAUNCH_FLAGS, **ACTOR_JOB_FLAGS}.items()}
            words, flags = shlex.split(text), {flag: field for field, flag in (root.options or {}).items()}
            root.model.model_validate({flags[flag]: kinds[flag](value)
                                       for flag, value in zip(words[::2], words[1::2])})
        else:
            call = ast.parse(text, mode="eval").body
            assert isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
            model = {model.__name__: model for model, _ in ((root.model, ""), *root.more)}[call.func.id]
            model(**{word.arg: ast.literal_eval(word.value) for word in call.keywords if word.arg})
    except (ConfigError, ValueError, KeyError, AssertionError, SyntaxError):
        return False
    return True


def _render(root: Root, model: type[BaseModel], stem: str, values: dict[str, Any]) -> str:
    """`values` (field -> value) as overrides under `stem`, as options, or as a call of `model`."""
    if root.style == "option":
        return " ".join(f"{(root.options or {})[name]} {shlex.quote(str(value))}" for name, value in values.items())
    if root.style == "keyword":
        return f"{model.__name__}(" + ", ".join(f"{name}={value!r}" for name, value in values.items()) + ")"
    dotted = f"{stem}." if stem else ""
    return " ".join(shlex.quote(f"{dotted}{name}={_flow(value, spaced=isinstance(value, dict))}")
                    for name, value in values.items())


def _example(root: Root, model: type[BaseModel], name: str, default: Any, place: Place) -> str:
    """The first valid example: the preferred value, then derived ones, then the default."""
    field = model.model_fields[name]
    candidates = [_lookup(model, name, EXAMPLES, PydanticUndefined)]
    candidates += _candidates(field.annotation, default, field.metadata) + [default]
    siblings = _lookup(model, name, CONTEXT, {})
    for value in candidates:
        if value is PydanticUndefined:
            continue
        if place.entry is not None:
            key, base = place.entry
            stem, values = place.stem.rpartition(".")[0], {key: {**base, **siblings, name: value}}
        else:
            stem, values = place.stem, {**siblings, name: value}
        words = [*place.context, _render(root, model, stem, values)]
        text = " ".join(word for index, word in enumerate(words) if word not in words[index + 1:])
        if validates(root, text):
            return f"`{text}`"
    return ""


def _row(root: Root, model: type[BaseModel], name: str, default: Any, place: Place) -> str:
    """One field as a table row; the model's own description wins over the table above, so that a
    description added to a model replaces the stopgap here."""
    field = model.model_fields[name]
    shown = "required" if default is PydanticUndefined else f"`{_flow(default)}`"
    description = field.description or ""
    option = f" `{(root.options or {})[name]}` |" if root.options else ""
    example = _example(root, model, name, None if default is PydanticUndefined else default, place)
    dotted = f"{place.stem}." if place.stem else ""
    return (f"| `{dotted}{name}` |{option} {_text(_type(field.annotation)[0])} | {shown} | "
            f"{_bounds(model, name)} | {_text(description)} | {example} |")


def _rows(root: Root, model: type[BaseModel], instance: BaseModel, place: Place,
          names: list[str] | None = None) -> list[str]:
    """One row per field (and per field of the sections a mapping holds), then the derived
    fields; `instance` holds the defaults as this root builds them."""
    rows, dotted = [], f"{place.stem}." if place.stem else ""
    for name in names if names is not None else model.model_fields:
        value = getattr(instance, name)
        if isinstance(value, dict) and value and all(isinstance(item, BaseModel) for item in value.values()):
            rows.append(_row(root, model, name, {key: item.model_dump(mode="json", exclude_defaults=True)
                                                 for key, item in value.items()}, place))
            key, entry = next(iter(value.items()))
            inner = Place(f"{dotted}{name}.<name>", place.context, (key, entry.model_dump(exclude_defaults=True)))
            rows += [_row(root, type(entry), inner_name, inner_field.get_default(call_default_factory=True), inner)
                     for inner_name, inner_field in type(entry).model_fields.items()]
        elif isinstance(value, BaseModel) and place.entry is None:  # a section inside a section
            rows += _rows(root, type(value), value, Place(f"{dotted}{name}", place.context))
        else:
            rows.append(_row(root, model, name, instance.model_dump(mode="json")[name], place))
            section = [member for member in typing.get_args(model.model_fields[name].annotation)
                       if isinstance(member, type) and issubclass(member, BaseModel)]
            if value is None and section and place.entry is None and place.stem:  # an optional section in a section
                rows += _rows(root, section[0], section[0](), Place(f"{dotted}{name}", place.context))
    for name, computed in type(instance).model_computed_fields.items() if names is None else ():
        description = computed.description or ""
        rows.append(f"| `{dotted}{name}` |{' |' if root.options else ''} derived | "
                    f"`{_flow(getattr(instance, name))}` |  | {_text(description)} |  |")
    return rows


def _table(root: Root, heading: str, rows: list[str]) -> str:
    """A section's rows under a `####` heading: the pages that cite a root's fields split it on its
    `###` heading, so sections must stay one level below."""
    option = " option |" if root.options else ""
    rule = "|---|---|---|---|---|---|" + ("---|" if root.options else "")
    return (f"#### {heading}\n\n| field |{option} type | default | bounds | description | example |\n{rule}\n"
            + "\n".join(rows) + "\n")


def _root(root: Root) -> str:
    """A config's tables: its top-level fields, then each section; a union field gets one table per
    member, and the overrides that select a member stand before each of its examples."""
    instance, head = root.model(), f"### {root.title}\n\n{root.intro}\n"
    if root.prefix:
        flat = ((root.model, root.prefix), *root.more)
        return "\n".join([head] + [_table(root, f"`{prefix}`", _rows(root, model, model(), Place(prefix)))
                                   for model, prefix in flat])
    fields = root.model.model_fields
    top = [name for name, field in fields.items()
           if _type(field.annotation)[0] != "section" and field.discriminator is None]
    parts = [head, _table(root, "Top level", _rows(root, root.model, instance, Place(""), top))]
    for name, field in fields.items():
        if field.discriminator is not None:
            for member in typing.get_args(field.annotation):
                tag = member.model_fields[str(field.discriminator)].default
                selects = () if isinstance(getattr(instance, name), member) else (f"{name}.{field.discriminator}={tag}",)
                place = Place(name, (*UNION_CONTEXT.get(member.__name__, ()), *selects))
                parts.append(_table(root, f"`{name}.{field.discriminator}: {tag}`", _rows(root, member, member(), place)))
        elif name not in top:
            parts.append(_table(root, f"`{name}`", _rows(root, field.annotation, getattr(instance, name), Place(name))))
    for name in top:  # an optional section (null by default) gets a table of its fields as well
        section = [m for m in typing.get_args(fields[name].annotation) if isinstance(m, type) and issubclass(m, BaseModel)]
        if section:
            place = Place(name, SECTION_CONTEXT.get(name, ()))
            parts.append(_table(root, f"`{name}`", _rows(root, section[0], section[0](), place)))
    return "\n".join(parts)


HEADER = """# Configuration reference

<!-- Generated by `python -m lamarckian_hpc.docs_reference > docs/reference/configuration.md`
from the models in lamarckian_hpc/config/: edit those, not this page. -->

A config is a YAML file (see `configs/`) with the sections below. Every field can be overridden on
the command line as `section.field=value`, anywhere after the subcommand; values are read as YAML
(`3`, `0.5`, `true`, `[64, 64]`, `null`, `{key: value}`). Unknown fields are errors, and so is a
value out of bounds: the command stops before anything runs, with one line that names the field
and what it accepts, and exit status 2. Types are strict: `true` is not a number, `'3'` is not an
int (an int is accepted where a float is asked for), and numbers are finite (`.inf` and `.nan` are
refused). A file may not use YAML aliases (`*name`), repeat a key (the error names both lines),
nest more than 32 levels or exceed 1 MiB. `lamarckian-hpc config show CONFIG [key=value ...]` prints
the config a run would use, every default filled in, as YAML that `train` and `evolve` accept.

Columns: *type* (`or null`: the field may be `null`); *default*, as `config show` prints it;
*bounds*, what the loader accepts (limits, choices, and rules that relate fields); *description*;
and an *example* that loads as written: overrides for the command line (quoted for the shell where
needed), options for `launch`, a constructor call for the sections used from Python. An override
of a mapping of sections (PBT's `algorithm.hyperparameters`) replaces it whole, so its examples
give the whole entry.
"""


def roots() -> tuple[tuple[str, tuple[Root, ...]], ...]:
    """The page's groups and configs, in order. `launch`'s flags live with the command
    (cluster/command.py, which imports nothing heavy), so they are read only here."""
    from .cluster.command import ACTOR_JOB_FLAGS, LAUNCH_FLAGS

    flags = {field: flag for flag, (field, _, _) in LAUNCH_FLAGS.items()}
    join_flags = {field: flag for flag, (field, _, _) in ACTOR_JOB_FLAGS.items()}
    evolve = "`evolve` configuration for `algorithm.name: {}`"
    return (
        ("Training runs", (Root(
            "`train` configuration", RunConfig,
            "Read by `lamarckian-hpc train` and `lamarckian-hpc launch` (`RunConfig`). `algorithm` is one of the "
            "`algorithm.name` sections below (default `ppo`); a section without a name is PPO's."),)),
        ("Evolution runs", (
            Root("`evolve` configuration", EVOLUTION.config, EVOLUTION.reference),
            *(Root(evolve.format(name), program.config, program.reference)
              for name, program in POPULATION_PROGRAMS.items()))),
        ("The league", (Root(
            "`league` configuration", LeagueConfig,
            "`LeagueConfig` (`lamarckian_hpc/config/multiagent.py`): the `league` section of a league run, also "
            "passed to `League` from Python; `MultiAgentConfig`, passed to `MultiAgentTrainer`, is the "
            "`multiagent` section of `train`.", style="keyword", prefix="league"),)),
        ("Slurm launch", (Root(
            "`launch` options", LaunchConfig,
            "`lamarckian-hpc launch CONFIG [key.path=value ...] [options]`: the config and overrides are those "
            "of `train`; the options fill `LaunchConfig` (`lamarckian_hpc/config/launch.py`) and are checked "
            "the same way.", style="option", prefix="launch", options=flags),
            Root("`join` options", ActorJobConfig,
                 "`lamarckian-hpc join RUN [options]`: an actor job whose nodes join the running run of the file RUN "
                 "(`ActorJobConfig`, `lamarckian_hpc/config/launch.py`). `launch --actor-jobs N` submits N such jobs "
                 "beside the learner job, each with these options written `--actor-nodes`, `--actor-cpus-per-node`, "
                 "and so on.", style="option", prefix="join", options=join_flags))),
    )


def documented_models() -> set[type[BaseModel]]:
    """Every model the page documents, for the test that no config model is left out."""
    found: set[type[BaseModel]] = set()

    def visit(annotation: Any) -> None:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation not in found:
                found.add(annotation)
                for field in annotation.model_fields.values():
                    visit(field.annotation)
        for arg in typing.get_args(annotation):
            visit(arg)

    for _, group in roots():
        for root in group:
            for model in (root.model, *(model for model, _ in root.more)):
                visit(model)
    return found


def reference_markdown() -> str:
    """The whole page. docs/reference/configuration.md is committed as this returns it, so the site
    builds without running code and a change to a model shows up as a diff of the page."""
    parts = [HEADER]
    for title, group in roots():
        parts += [f"## {title}\n", *(_root(root) for root in group)]
    return "\n".join(parts)


if __name__ == "__main__":
    sys.stdout.write(reference_markdown())
