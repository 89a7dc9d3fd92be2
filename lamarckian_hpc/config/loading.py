"""YAML files and `key.path=value` overrides into validated configs, with one-line errors."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from .base import ConfigError
from .train import RunConfig

ConfigT = TypeVar("ConfigT", bound=BaseModel)


def _set_path(tree: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    if any(not key for key in keys):
        raise ConfigError(f"config error: override {dotted!r}: empty key in dotted path")
    node = tree
    for depth, key in enumerate(keys[:-1]):
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            where = ".".join(keys[: depth + 1])
            raise ConfigError(f"config error: override {dotted!r}: {where} is a value, not a section")
        node = child
    node[keys[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """`a.b=value` -> ("a.b", value), the value read as YAML so that 3, 0.5, true and [1, 2] are typed."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"config error: override {text!r} is not of the form key.path=value")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
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


def _walk(loc: tuple[Any, ...], root: type[BaseModel]) -> tuple[list[str], type[BaseModel]]:
    """An error path as the user wrote it (without pydantic's union tags) and the section holding its
    last field."""
    parts: list[str] = []
    section: type[BaseModel] | None = root
    holder = root
    remaining = [str(part) for part in loc]
    while remaining:
        part = remaining.pop(0)
        parts.append(part if part.isprintable() and part.strip() == part and part else repr(part))
        if section is None:
            continue
        holder = section
        members = _union_members(section, part)
        if members:
            section = members.pop(remaining.pop(0)) if remaining and remaining[0] in members else None
            continue
        annotation = getattr(section.model_fields.get(part), "annotation", None)
        section = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    return parts, holder


def _describe(errors: list[dict[str, Any]], root: type[BaseModel]) -> str:
    """One clause per problem; unknown fields of one section are named together."""
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
    return apply_overrides(tree, overrides, source, model)


def apply_overrides(tree: dict[str, Any], overrides: list[str] | tuple[str, ...] = (), source: str = "config",
                    model: type[ConfigT] = RunConfig) -> ConfigT:  # type: ignore[assignment]
    """Validate `tree` (a loaded file, or the config a run file stored) with `key.path=value` overrides."""
    for text in overrides:
        key, value = parse_override(text)
        _set_path(tree, key, value)
    return build_config(tree, source, model)
