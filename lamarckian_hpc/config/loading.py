"""YAML files and `key.path=value` overrides into validated configs, with one-line errors.

Config files come from users, so reading one must end in a config or one `ConfigError` line, and
must stay cheap whatever the file holds. YAML itself allows three things that break that, and the
loader here refuses them while it composes the document, before anything is built:

- aliases (`*name`): a few lines of nested aliases expand into billions of values (an "alias
  bomb") the moment anything walks the tree; config files have no need for them;
- deep nesting: PyYAML composes recursively, so a few thousand brackets overflow the stack;
- duplicate keys: YAML keeps the last silently, hiding the first from whoever reads the file.

Floats are read as YAML 1.2 reads them (`1e-3` is a number, as in JSON), since the config fields
are strictly typed and a number must not arrive as a string.
"""

from __future__ import annotations

import re
import reprlib
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from .base import ConfigError
from .train import RunConfig

ConfigT = TypeVar("ConfigT", bound=BaseModel)

#: Nesting a config may have; the sections nest three levels deep, env kwargs a few more.
MAX_DEPTH = 32
#: Values (scalars, lists and mappings) one file or override may hold; the configs under configs/
#: hold about a hundred.
MAX_NODES = 100_000
#: Size of a config file; the ones under configs/ are a few kB.
MAX_FILE_BYTES = 1024 * 1024
#: Characters of a value echoed in an error; the line stays readable whatever was given.
ECHO_CHARACTERS = 80
#: Problems named in one error line; the rest are counted.
MAX_PROBLEMS = 12

_FLOAT_1_2 = re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+
                           |[-+]?\.[0-9][0-9_]*[eE][-+]?[0-9]+)$""", re.X)


class _Refused(yaml.MarkedYAMLError):
    """A YAML document the config loader does not build: an alias, too deep, too big, a duplicate key."""


class _ConfigLoader(yaml.SafeLoader):
    """SafeLoader that refuses aliases, bounds depth and size while composing, and duplicate keys
    while constructing."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._nodes = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:  # type: ignore[override]
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise _Refused(None, None, f"alias *{_cut(event.anchor, 30)} is not allowed in a config "
                           "(write the value out)", event.start_mark)
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise _Refused(None, None, f"more than {MAX_NODES:,} values", self.peek_event().start_mark)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Refused(None, None, f"nested more than {MAX_DEPTH} levels deep", self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                first = seen.get(key)
            except TypeError:  # unhashable: the base class reports it
                continue
            if first is not None:
                raise _Refused(None, None, f"duplicate key {_echo(key)} (lines {first} and {line})",
                               key_node.start_mark)
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


_ConfigLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_1_2, list("-+0123456789."))

_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 3, ECHO_CHARACTERS, ECHO_CHARACTERS, 40
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 6


def _cut(text: str, limit: int = ECHO_CHARACTERS) -> str:
    """`text` on one line and at most `limit` characters, so that one error stays one short line."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _echo(value: Any) -> str:
    """A short repr of a value given by the user; bounded in time and length whatever its size."""
    try:
        return _cut(_REPR.repr(value))
    except Exception:  # a repr that fails must not hide the error being reported
        return f"<{type(value).__name__}>"


def parse_yaml(text: str) -> Any:
    """One YAML document with aliases, deep nesting, oversized documents and duplicate keys refused.

    Raises yaml.YAMLError for text that is not YAML (`_Refused`, a subclass, for what is refused),
    and the ValueError and the like that YAML's constructors raise for values Python cannot hold."""
    loader = _ConfigLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _yaml_problem(error: BaseException) -> tuple[str, str]:
    """(" line N" or "", what is wrong) of an error raised while reading YAML."""
    if isinstance(error, yaml.MarkedYAMLError):
        mark = error.problem_mark or error.context_mark
        where = f" line {mark.line + 1}" if mark is not None else ""
        return where, _cut(error.problem or error.context or "could not parse", 160)
    if isinstance(error, yaml.YAMLError):
        return "", _cut(str(error) or "could not parse", 160)
    if isinstance(error, RecursionError):
        return "", f"nested more than {MAX_DEPTH} levels deep"
    return "", _cut(f"{type(error).__name__}: {error}", 160)


def _set_path(tree: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    if any(not key for key in keys):
        raise ConfigError(f"config error: override {_echo(dotted)}: empty key in dotted path")
    if len(keys) > MAX_DEPTH:
        raise ConfigError(f"config error: override {_echo(dotted)}: nested more than {MAX_DEPTH} levels deep")
    node = tree
    for depth, key in enumerate(keys[:-1]):
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            where = ".".join(keys[: depth + 1])
            raise ConfigError(f"config error: override {_echo(dotted)}: {_cut(where)} is a value, not a section")
        node = child
    node[keys[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """`a.b=value` -> ("a.b", value), the value read as YAML so that 3, 0.5, 1e-3, true and [1, 2]
    are typed. Text that is not YAML (`[1, 2`) is kept as a string, for the field to judge; what
    the loader refuses (aliases, deep nesting, duplicate keys) is an error."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"config error: override {_echo(text)} is not of the form key.path=value")
    try:
        value = parse_yaml(raw) if raw.strip() else ""
    except _Refused as error:
        raise ConfigError(f"config error: override {_echo(key.strip())}: {_yaml_problem(error)[1]}") from None
    except yaml.YAMLError:
        value = raw
    except Exception as error:  # a value YAML reads but Python cannot hold (an int of 5,000 digits)
        raise ConfigError(f"config error: override {_echo(key.strip())}: {_yaml_problem(error)[1]}") from None
    return key.strip(), value


def _union_members(model: type[BaseModel], field: str) -> dict[str, type[BaseModel]]:
    """Tag -> section of a discriminated-union field (algorithm: ppo -> PPOConfig, ...); {} otherwise."""
    info = model.model_fields.get(field)
    if info is None or info.discriminator is None:
        return {}
    members: dict[str, type[BaseModel]] = {}
    for member in typing.get_args(info.annotation):
        if isinstance(member, type) and issubclass(member, BaseModel):
            tag = member.model_fields[str(info.discriminator)].default
            members[tag] = member
    return members


def _key(part: str) -> str:
    """A key of an error path as the user wrote it, quoted when it is odd, cut when it is long."""
    if part and part.isprintable() and part.strip() == part:
        return _cut(part, 40)
    return _echo(part)


def _walk(loc: tuple[Any, ...], root: type[BaseModel]) -> tuple[list[str], type[BaseModel]]:
    """An error path as the user wrote it (without pydantic's union tags) and the section holding its
    last field."""
    parts: list[str] = []
    section: type[BaseModel] | None = root
    holder = root
    remaining = [str(part) for part in loc]
    while remaining:
        part = remaining.pop(0)
        parts.append(_key(part))
        if section is None:
            continue
        holder = section
        members = _union_members(section, part)
        if members:
            section = members.pop(remaining.pop(0)) if remaining and remaining[0] in members else None
            continue
        annotation = getattr(section.model_fields.get(part), "annotation", None)
        optional = typing.get_origin(annotation) in (typing.Union, types.UnionType)  # a section or None
        members = typing.get_args(annotation) if optional else (annotation,)
        sections = [m for m in members if isinstance(m, type) and issubclass(m, BaseModel)]
        section = sections[0] if len(sections) == 1 else None
    return parts, holder


def _describe(errors: list[dict[str, Any]], root: type[BaseModel]) -> str:
    """One clause per problem; unknown fields of one section are named together. Echoed values and
    keys are cut short, and past MAX_PROBLEMS problems the rest are only counted."""
    clauses: list[str] = []
    unknown: dict[str, tuple[list[str], type[BaseModel]]] = {}
    for error in errors:
        parts, holder = _walk(error["loc"], root)
        path = ".".join(parts) or "<root>"
        if error["type"] == "extra_forbidden":
            section = ".".join(parts[:-1])
            names, model = unknown.setdefault(section, ([], holder))
            names.append(path)
            continue
        message = _cut(error["msg"].removeprefix("Value error, "), 240)
        got = error.get("input")
        shown = "" if isinstance(got, dict) else f" (got {_echo(got)})"
        # A check across sections (a root validator) names its fields in its message.
        clauses.append(f"{path}: {message}{shown}" if parts else message)
    for names, model in unknown.values():
        field = "unknown field" if len(names) == 1 else "unknown fields"
        named = ", ".join(names[:MAX_PROBLEMS]) + (f" and {len(names) - MAX_PROBLEMS} more"
                                                   if len(names) > MAX_PROBLEMS else "")
        clauses.append(f"{named}: {field} (allowed: {', '.join(model.model_fields)})")
    if len(clauses) > MAX_PROBLEMS:
        clauses = [*clauses[:MAX_PROBLEMS], f"and {len(clauses) - MAX_PROBLEMS} more problems"]
    return "; ".join(clauses)


def build_config(tree: dict[str, Any], source: str = "config", model: type[ConfigT] = RunConfig) -> ConfigT:  # type: ignore[assignment]
    """Validate a plain dict into `model` (a run by default), turning pydantic's report into one line."""
    try:
        return model.model_validate(tree)
    except ValidationError as error:
        problems = _describe(error.errors(), model)
        raise ConfigError(f"config error in {source}: {problems}") from None
    except RecursionError:  # a tree built in code, nested past what validation can follow
        raise ConfigError(f"config error in {source}: nested too deeply") from None


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The mapping a YAML config file holds ({} for an empty file); every way it can be unusable,
    from a missing file to an alias or a duplicate key, is one ConfigError line naming the file."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"config error: file not found: {file}")
    try:
        size = file.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ConfigError(f"config error: {file}: {size:,} bytes is too large for a config file "
                              f"(at most {MAX_FILE_BYTES:,})")
        text = file.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"config error: {file}: cannot read: {_cut(str(error), 160)}") from None
    try:
        loaded = parse_yaml(text)
    except Exception as error:  # YAMLError, or a value Python cannot hold (int of 5,000 digits, bad date)
        where, problem = _yaml_problem(error)
        raise ConfigError(f"config error: {file}{where}: invalid YAML: {problem}") from None
    if loaded is not None and not isinstance(loaded, dict):
        raise ConfigError(f"config error: {file}: top level must be a mapping, got {type(loaded).__name__}")
    return loaded or {}


def load_config(path: str | Path | None, overrides: list[str] | tuple[str, ...] = (),
                model: type[ConfigT] = RunConfig) -> ConfigT:  # type: ignore[assignment]
    """Read a YAML config (or the defaults when path is None) and apply `key.path=value` overrides."""
    tree = {} if path is None else read_config_file(path)
    return apply_overrides(tree, overrides, "defaults" if path is None else str(path), model)


def apply_overrides(tree: dict[str, Any], overrides: list[str] | tuple[str, ...] = (), source: str = "config",
                    model: type[ConfigT] = RunConfig) -> ConfigT:  # type: ignore[assignment]
    """Validate `tree` (a loaded file, or the config a run file stored) with `key.path=value` overrides."""
    for text in overrides:
        key, value = parse_override(text)
        _set_path(tree, key, value)
    return build_config(tree, source, model)
