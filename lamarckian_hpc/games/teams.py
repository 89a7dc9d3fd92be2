"""Teams compiled from the game's tables: a hero with its chosen equipment leading a squad of one
soldier type, as the plain numbers a battle reads. Compiling once per (hero, soldier, equipment)
keeps table look-ups out of the battle loop."""

from __future__ import annotations

from dataclasses import dataclass

from .data import GameData, Skill, TeamSpec


@dataclass(frozen=True)
class TeamStats:
    hero: str
    soldier: str
    equipment: str
    hero_health: float
    hero_attack: float
    hero_defense: float
    hero_cooldown: float
    skills: tuple[Skill, ...]
    soldier_type: int
    strong_against: int  # soldier type index; -1 for none
    soldier_health: float
    soldier_attack: float
    soldier_defense: float
    soldier_cooldown: float
    soldier_count: int
    soldier_cost: float
    hero_value: float  # the hero's and its equipment's economic resources

    @property
    def resources(self) -> float:
        """Economic resources of the whole team at full strength."""
        return self.hero_value + self.soldier_cost * self.soldier_count

    @property
    def label(self) -> str:
        return f"{self.hero}+{self.soldier}+{self.equipment}"


def compile_team(data: GameData, hero_index: int, soldier_index: int, equipment_choice: int) -> TeamStats:
    """The team of hero `hero_index` leading soldiers `soldier_index`, carrying the hero's
    `equipment_choice`-th allowed item."""
    hero = data.heroes[hero_index]
    soldier = data.soldiers[soldier_index]
    item = data.equipment[data.equipment_index[hero.equipment[equipment_choice]]]
    skills = data.skill_index
    strong = data.soldier_index.get(soldier.strong_against, -1) if soldier.strong_against else -1
    return TeamStats(
        hero=hero.name, soldier=soldier.name, equipment=item.name,
        hero_health=hero.health + item.health, hero_attack=hero.attack + item.attack,
        hero_defense=hero.defense + item.defense, hero_cooldown=hero.cooldown / (1.0 + item.haste),
        skills=tuple(data.skills[skills[name]] for name in hero.skills), soldier_type=soldier_index,
        strong_against=strong, soldier_health=soldier.health, soldier_attack=soldier.attack,
        soldier_defense=soldier.defense, soldier_cooldown=soldier.cooldown, soldier_count=soldier.count,
        soldier_cost=soldier.cost, hero_value=hero.cost + item.cost)


def compile_spec(data: GameData, spec: TeamSpec) -> TeamStats:
    """A team named in a data file (a baseline, a testing scenario)."""
    hero_index = data.hero_index[spec.hero]
    choice = data.heroes[hero_index].equipment.index(spec.equipment)
    return compile_team(data, hero_index, data.soldier_index[spec.soldier], choice)
