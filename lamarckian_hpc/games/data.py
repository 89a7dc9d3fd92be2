"""The game's tables (heroes, skills, equipment, soldiers, rules), read from plain YAML files a
designer edits (`games/data/` by default) and checked when loaded: every row is validated by a
strict pydantic model, and cross references (a hero's skills and equipment, a baseline's hero)
must name existing rows. A bad file stops with one line naming the file, the row and the field,
so a designer never meets a traceback from inside a battle."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..config import ConfigError
from ..config.loading import read_config_file

BUILT_IN_DATA = Path(__file__).resolve().parent / "data"
TABLE_FILES = ("heroes.yaml", "skills.yaml", "equipment.yaml", "soldiers.yaml", "rules.yaml")
SkillKind = Literal["strike", "volley", "heal", "shield", "stun", "war_cry", "mirror", "rally"]
BUG_NAMES = ("damage_overflow", "crash_skill_combo", "stuck_battle", "over_max_health")


class GameDataError(ValueError):
    """A game data file that cannot be used; its message is one line for the designer."""


class Row(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Soldier(Row):
    name: str = Field(..., min_length=1)
    health: float = Field(..., gt=0)
    attack: float = Field(..., ge=0)
    defense: float = Field(..., ge=0)
    cooldown: float = Field(..., gt=0)
    count: int = Field(..., ge=1, le=10_000)
    cost: float = Field(..., ge=0)
    strong_against: str | None = None


class Skill(Row):
    name: str = Field(..., min_length=1)
    kind: SkillKind
    power: float = Field(..., ge=0)
    cooldown: float = Field(..., ge=0)
    duration: float = Field(0.0, ge=0)


class Equipment(Row):
    name: str = Field(..., min_length=1)
    attack: float = 0.0
    defense: float = 0.0
    health: float = 0.0
    haste: float = Field(0.0, gt=-0.9, le=5.0)
    cost: float = Field(0.0, ge=0)


class Hero(Row):
    name: str = Field(..., min_length=1)
    health: float = Field(..., gt=0)
    attack: float = Field(..., ge=0)
    defense: float = Field(..., ge=0)
    cooldown: float = Field(..., gt=0)
    cost: float = Field(..., ge=0)
    skills: list[str] = Field(..., min_length=1, max_length=4)
    equipment: list[str] = Field(..., min_length=1)


class TeamSpec(Row):
    """One team as names: its hero, the soldier type it leads and the equipment it carries."""

    hero: str
    soldier: str
    equipment: str


class Baseline(Row):
    name: str = Field(..., min_length=1)
    teams: list[TeamSpec] = Field(..., min_length=1)


class Rules(Row):
    time_limit: float = Field(120.0, gt=0)
    damage_variance: float = Field(0.1, ge=0, lt=1)
    counter_multiplier: float = Field(1.5, gt=0)
    war_cry_multiplier: float = Field(3.0, ge=1)
    max_war_cry_stacks: int = Field(3, ge=0, le=100)
    war_cry_fade_seconds: float = Field(5.0, gt=0)
    defend_factor: float = Field(0.5, ge=0, le=1)
    stuck_seconds: float = Field(20.0, gt=0)
    lineup_size: int = Field(5, ge=2)
    battles_per_pair: int = Field(2, ge=1, le=100)


class TestingScenario(Row):
    team: TeamSpec
    opponent: TeamSpec
    max_decisions: int = Field(40, ge=1, le=10_000)
    time_limit: float = Field(120.0, gt=0)


class Bugs(Row):
    damage_overflow: bool = False
    crash_skill_combo: bool = False
    stuck_battle: bool = False
    over_max_health: bool = False


class RulesFile(Row):
    rules: Rules = Field(default_factory=Rules)
    baselines: list[Baseline] = Field(default_factory=list)
    testing: TestingScenario
    bugs: Bugs = Field(default_factory=Bugs)


class GameData(Row):
    """All tables, with every cross reference checked; rows keep the files' order."""

    heroes: list[Hero] = Field(..., min_length=2)
    skills: list[Skill] = Field(..., min_length=1)
    equipment: list[Equipment] = Field(..., min_length=1)
    soldiers: list[Soldier] = Field(..., min_length=1)
    rules: Rules
    baselines: list[Baseline]
    testing: TestingScenario
    bugs: Bugs

    @model_validator(mode="after")
    def _references(self) -> GameData:
        for table in ("heroes", "skills", "equipment", "soldiers"):
            names = [row.name for row in getattr(self, table)]
            repeated = sorted({name for name in names if names.count(name) > 1})
            if repeated:
                raise ValueError(f"{table}: repeated name {repeated[0]!r}")
        skills, gear = set(self.skill_index), set(self.equipment_index)
        soldiers = set(self.soldier_index)
        for hero in self.heroes:
            for skill in hero.skills:
                if skill not in skills:
                    raise ValueError(f"heroes: {hero.name}: unknown skill {skill!r}")
            for item in hero.equipment:
                if item not in gear:
                    raise ValueError(f"heroes: {hero.name}: unknown equipment {item!r}")
        for soldier in self.soldiers:
            if soldier.strong_against is not None and soldier.strong_against not in soldiers:
                raise ValueError(f"soldiers: {soldier.name}: strong_against names unknown soldier "
                                 f"{soldier.strong_against!r}")
        if self.rules.lineup_size > len(self.heroes):
            raise ValueError(f"rules: lineup_size {self.rules.lineup_size} exceeds the {len(self.heroes)} heroes")
        teams = [(f"baselines: {b.name}", team) for b in self.baselines for team in b.teams]
        teams += [("testing: team", self.testing.team), ("testing: opponent", self.testing.opponent)]
        for where, team in teams:
            self.check_team(team, where)
        return self

    def check_team(self, team: TeamSpec, where: str) -> None:
        if team.hero not in self.hero_index:
            raise ValueError(f"{where}: unknown hero {team.hero!r}")
        if team.soldier not in self.soldier_index:
            raise ValueError(f"{where}: unknown soldier {team.soldier!r} (allowed: {', '.join(self.soldier_index)})")
        allowed = self.heroes[self.hero_index[team.hero]].equipment
        if team.equipment not in allowed:
            raise ValueError(f"{where}: {team.hero} cannot carry {team.equipment!r} (allowed: {', '.join(allowed)})")

    @property
    def hero_index(self) -> dict[str, int]:
        return {hero.name: index for index, hero in enumerate(self.heroes)}

    @property
    def skill_index(self) -> dict[str, int]:
        return {skill.name: index for index, skill in enumerate(self.skills)}

    @property
    def equipment_index(self) -> dict[str, int]:
        return {item.name: index for index, item in enumerate(self.equipment)}

    @property
    def soldier_index(self) -> dict[str, int]:
        return {soldier.name: index for index, soldier in enumerate(self.soldiers)}

    def with_bugs(self, **switches: bool) -> GameData:
        """The same game with some planted bugs switched (tests and the testing benchmark)."""
        unknown = set(switches) - set(BUG_NAMES)
        if unknown:
            raise GameDataError(f"unknown bug {sorted(unknown)[0]!r} (allowed: {', '.join(BUG_NAMES)})")
        return self.model_copy(update={"bugs": self.bugs.model_copy(update=switches)})


def _read_yaml(path: Path) -> dict:
    """A game's table, read as configs are (aliases, deep nesting, huge files and duplicate keys refused)."""
    if not path.is_file():
        raise GameDataError(f"game data: missing file {path}")
    try:
        return read_config_file(path)
    except ConfigError as error:
        raise GameDataError(f"game data: {str(error).removeprefix('config error: ')}") from None


def _first_error(error: ValidationError, source: str, tree: dict) -> str:
    """One line: file, row (by name where it has one), field and what was wrong."""
    first = error.errors()[0]
    location = list(first["loc"])
    parts: list[str] = []
    node: object = tree
    for key in location:
        node = node[key] if isinstance(node, (dict, list)) and _has(node, key) else None
        if isinstance(key, int) and isinstance(node, dict) and "name" in node:
            parts.append(str(node["name"]))
        else:
            parts.append(str(key))
    message = first["msg"].removeprefix("Value error, ")
    got = f" (got {first['input']!r})" if first["type"] not in ("value_error", "missing") and \
        not isinstance(first.get("input"), (dict, list)) else ""
    return f"game data: {source}: {'.'.join(parts)}: {message}{got}" if parts else f"game data: {source}: {message}"


def _has(node: dict | list, key: object) -> bool:
    return key in node if isinstance(node, dict) else isinstance(key, int) and 0 <= key < len(node)


def load_game_data(folder: str | Path | None = None) -> GameData:
    """The tables in `folder` (default: the built-in game), validated; GameDataError otherwise."""
    folder = BUILT_IN_DATA if folder is None else Path(folder)
    if not folder.is_dir():
        raise GameDataError(f"game data: no such folder {folder}")
    trees = {name: _read_yaml(folder / name) for name in TABLE_FILES}
    tables: dict[str, object] = {}
    for key in ("heroes", "skills", "equipment", "soldiers"):
        tree = trees[f"{key}.yaml"]
        try:
            tables[key] = TableFile.model_validate(tree).rows(key, folder)
        except ValidationError as error:
            raise GameDataError(_first_error(error, str(folder / f"{key}.yaml"), tree)) from None
    try:
        rules = RulesFile.model_validate(trees["rules.yaml"])
    except ValidationError as error:
        raise GameDataError(_first_error(error, str(folder / "rules.yaml"), trees["rules.yaml"])) from None
    try:
        return GameData(**tables, rules=rules.rules, baselines=rules.baselines, testing=rules.testing,
                        bugs=rules.bugs)  # type: ignore[arg-type]
    except ValidationError as error:
        message = error.errors()[0]["msg"].removeprefix("Value error, ")
        table = message.split(":", 1)[0]  # cross-reference errors start with their table's name
        source = folder / (f"{table}.yaml" if f"{table}.yaml" in TABLE_FILES else "rules.yaml")
        raise GameDataError(f"game data: {source}: {message}") from None


class TableFile(BaseModel):
    """A table file: one top-level key (its table's name) holding the rows."""

    model_config = ConfigDict(extra="forbid")
    heroes: list[Hero] | None = None
    skills: list[Skill] | None = None
    equipment: list[Equipment] | None = None
    soldiers: list[Soldier] | None = None

    def rows(self, key: str, folder: Path) -> list:
        rows = getattr(self, key)
        if rows is None:
            raise GameDataError(f"game data: {folder / f'{key}.yaml'}: needs the top-level key {key!r}")
        return rows
