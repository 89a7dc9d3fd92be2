"""The battle simulator: two teams, each a hero leading a squad of soldiers, fight until one side
has fallen or time runs out. Battles are asynchronous the way the live game is: every unit acts on
its own cooldown, taken from an event queue in battle time, never in lock-step with the others, and
a stunned hero simply loses its turns. The only randomness is a per-battle `random.Random(seed)`,
so a battle is a pure function of its teams, rules, seed and (for automated testing) the actions
a controller chose. Pure python on purpose: a battle takes a fraction of a millisecond, which is
what lets a balancing run play thousands of them per generation.

The planted bugs (`Bugs` in the rules file, all off by default) live here, guarded by their
switches, and the symptoms a tester can observe are checked after every action: a crash (an
exception in the battle code), negative damage, a hero above its maximum health, and a stuck
battle (no damage for `rules.stuck_seconds` while both sides still stand)."""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from .data import Bugs, Rules, Skill
from .teams import TeamStats

ACTION_NAMES = ("attack_hero", "attack_squad", "skill_1", "skill_2", "skill_3", "skill_4", "defend", "switch_row")
NUM_ACTIONS = len(ACTION_NAMES)
SYMPTOMS = ("crash", "negative_damage", "health_above_maximum", "stuck")
#: Decides the controlled hero's action from (observation, decision index); None hands over to the AI.
Controller = Callable[[tuple[float, ...], int], "int | None"]


class Unit:
    """A hero or a squad in battle; a squad's health is the pool of its soldiers."""

    __slots__ = ("side", "is_hero", "hp", "max_hp", "attack", "defense", "cooldown", "soldier_health",
                 "soldier_type", "strong_against", "skills", "ready", "stacks", "stacked_at", "shield", "shield_until",
                 "stunned_until", "defending", "back")

    def __init__(self, side: int, is_hero: bool, hp: float, attack: float, defense: float, cooldown: float) -> None:
        self.side, self.is_hero = side, is_hero
        self.hp = self.max_hp = hp
        self.attack, self.defense, self.cooldown = attack, defense, cooldown
        self.soldier_health, self.soldier_type, self.strong_against = 1.0, -1, -1
        self.skills: tuple[Skill, ...] = ()
        self.ready: list[float] = []
        self.stacks, self.stacked_at, self.shield, self.shield_until, self.stunned_until = 0, 0.0, 0.0, 0.0, 0.0
        self.defending = self.back = False

    def alive_soldiers(self) -> int:
        return math.ceil(self.hp / self.soldier_health - 1e-9) if self.hp > 0 else 0


@dataclass
class BattleResult:
    winner: int  # 0 or 1; -1 for a draw at the time limit
    time: float
    remaining_strength: tuple[float, float]  # per side, the share of its total health left, 0..1
    remaining_resources: tuple[float, float]  # per side, economic resources left
    actions: list[int] = field(default_factory=list)  # the controlled hero's decisions, in order
    signatures: set[tuple[int, ...]] = field(default_factory=set)  # discretised states seen by the controller
    symptom: str | None = None  # the first bug symptom observed, if any
    detail: str = ""


def _units(team: TeamStats, side: int) -> tuple[Unit, Unit]:
    hero = Unit(side, True, team.hero_health, team.hero_attack, team.hero_defense, team.hero_cooldown)
    hero.skills = team.skills
    hero.ready = [skill.cooldown * 0.5 for skill in team.skills]
    squad = Unit(side, False, team.soldier_health * team.soldier_count, team.soldier_attack, team.soldier_defense,
                 team.soldier_cooldown)
    squad.soldier_health, squad.soldier_type, squad.strong_against = (team.soldier_health, team.soldier_type,
                                                                      team.strong_against)
    return hero, squad


class Battle:
    """One battle of team `a` (side 0) against team `b` (side 1); `controller` drives side 0's hero."""

    def __init__(self, a: TeamStats, b: TeamStats, rules: Rules, bugs: Bugs, seed: int,
                 controller: Controller | None = None, max_decisions: int = 0) -> None:
        self.teams = (a, b)
        self.rules, self.bugs = rules, bugs
        self.rng = random.Random(seed)
        self.controller, self.max_decisions = controller, max_decisions
        self.units = (*_units(a, 0), *_units(b, 1))  # hero 0, squad 0, hero 1, squad 1
        self.now = self.last_damage = 0.0
        self.fallen = False  # set when a hero or squad falls: only then can the battle be over
        self.result = BattleResult(-1, 0.0, (1.0, 1.0), (a.resources, b.resources))

    # ----- queries -----------------------------------------------------------------------------
    def hero(self, side: int) -> Unit:
        return self.units[2 * side]

    def squad(self, side: int) -> Unit:
        return self.units[2 * side + 1]

    def standing(self, side: int) -> bool:
        return self.hero(side).hp > 0 or self.squad(side).hp > 0

    def observation(self) -> tuple[float, ...]:
        """What the controlled hero (side 0) sees: health shares, war cry stacks, shield, the enemy's
        stun, its own row, battle time and which skills are ready."""
        hero, squad, enemy, enemy_squad = self.units
        ready = [1.0 if self.now >= at else 0.0 for at in hero.ready] + [0.0] * (4 - len(hero.ready))
        return (hero.hp / hero.max_hp, squad.hp / squad.max_hp, enemy.hp / enemy.max_hp,
                enemy_squad.hp / enemy_squad.max_hp, float(hero.stacks), float(hero.shield > 0),
                float(enemy.stunned_until > self.now), float(hero.back), self.now / self.rules.time_limit, *ready)

    def signature(self) -> tuple[int, ...]:
        """The observation discretised: the states whose novelty automated testing rewards."""
        hero, squad, enemy, enemy_squad = self.units
        idle = min(int((self.now - self.last_damage) / 5.0), 4)
        return (int(4 * hero.hp / hero.max_hp), int(4 * squad.hp / squad.max_hp), int(4 * enemy.hp / enemy.max_hp),
                int(4 * enemy_squad.hp / enemy_squad.max_hp), min(hero.stacks, 12), int(hero.shield > 0),
                int(enemy.stunned_until > self.now), int(hero.back), idle)

    # ----- effects -----------------------------------------------------------------------------
    def _roll(self) -> float:
        variance = self.rules.damage_variance
        return 1.0 + variance * (2.0 * self.rng.random() - 1.0)

    def _multiplier(self, unit: Unit) -> float:
        return self.rules.war_cry_multiplier ** unit.stacks if unit.is_hero else 1.0

    def _damage(self, source: Unit, target: Unit, base: float) -> None:
        amount = base * self._roll() * 100.0 / (100.0 + max(target.defense, 0.0))
        if source.is_hero:
            amount *= self._multiplier(source)
            stacks, source.stacks = source.stacks, 0
            if self.bugs.damage_overflow:  # planted: damage kept in a 16-bit integer
                amount = float((int(amount) + 32768) % 65536 - 32768)
        else:
            stacks = 0
            if target.soldier_type >= 0 and source.strong_against == target.soldier_type:
                amount *= self.rules.counter_multiplier
        if amount < 0:
            self._symptom("negative_damage", f"{amount:.0f} damage dealt with {stacks} war cry stacks")
            return
        if target.is_hero and target.defending:
            amount *= self.rules.defend_factor
        if target.shield > 0 and self.now < target.shield_until:
            absorbed = min(target.shield, amount)
            target.shield -= absorbed
            amount -= absorbed
        target.hp = max(0.0, target.hp - amount)
        self.last_damage = self.now
        if target.hp <= 0:
            self.fallen = True
            if not target.is_hero:
                self._squad_fell(target.side)

    def _squad_fell(self, side: int) -> None:
        """A hero without soldiers cannot stay behind them: it steps to the front row."""
        self.hero(side).back = False

    def _reachable(self, attacker: Unit, target: Unit) -> bool:
        if target.hp <= 0:
            return False
        if target.is_hero and target.back:
            return False  # the back row is out of reach of attacks
        return not (attacker.is_hero and attacker.back)

    def _basic_attack(self, unit: Unit, prefer_hero: bool) -> None:
        enemy, enemy_squad = self.hero(1 - unit.side), self.squad(1 - unit.side)
        order = (enemy, enemy_squad) if prefer_hero else (enemy_squad, enemy)
        for target in order:
            if self._reachable(unit, target):
                base = unit.attack * (unit.alive_soldiers() if not unit.is_hero else 1)
                self._damage(unit, target, base)
                return

    def _cast(self, hero: Unit, slot: int) -> bool:
        """Casts the skill in `slot` if it is ready and has a use; False otherwise."""
        if slot >= len(hero.skills) or self.now < hero.ready[slot]:
            return False
        skill = hero.skills[slot]
        enemy, enemy_squad, squad = self.hero(1 - hero.side), self.squad(1 - hero.side), self.squad(hero.side)
        kind = skill.kind
        if kind == "strike":
            if not self._reachable(hero, enemy):
                return False
            self._damage(hero, enemy, skill.power * hero.attack)
        elif kind == "volley":
            if enemy_squad.hp <= 0:
                return False
            self._damage(hero, enemy_squad, skill.power * hero.attack)
        elif kind == "heal":
            if hero.hp >= hero.max_hp:
                return False
            hero.hp = min(hero.max_hp, hero.hp + skill.power * hero.attack)
        elif kind == "shield":
            hero.shield, hero.shield_until = skill.power * hero.attack, self.now + skill.duration
        elif kind == "stun":
            if enemy.hp <= 0:
                return False
            enemy.stunned_until = max(enemy.stunned_until, self.now + skill.duration)
        elif kind == "war_cry":
            if hero.stacks >= self.rules.max_war_cry_stacks and not self.bugs.damage_overflow:
                return False  # planted bug: without the cap, stacks grow without bound
            hero.stacks += 1
            hero.stacked_at = self.now
        elif kind == "mirror":
            if enemy.hp <= 0:
                return False
            self._mirror(hero, enemy)
        elif kind == "rally":
            if squad.hp <= 0 or squad.hp >= squad.max_hp:
                return False
            squad.hp = min(squad.max_hp, squad.hp + skill.power * squad.max_hp)
        hero.ready[slot] = self.now + skill.cooldown
        return True

    def _mirror(self, hero: Unit, enemy: Unit) -> None:
        """Exchange health shares with the enemy hero. Cast from the back row, shielded and with
        three war cry stacks, on a stunned enemy, the stun lasts longer in proportion to the heroes'
        action rates."""
        if self.bugs.over_max_health and hero.shield > 0 and self.now < hero.shield_until:
            hero.hp, enemy.hp = enemy.hp, hero.hp  # planted: raw health, not shares, under a shield
        else:
            share, enemy_share = hero.hp / hero.max_hp, enemy.hp / enemy.max_hp
            hero.hp, enemy.hp = enemy_share * hero.max_hp, share * enemy.max_hp
        if enemy.stunned_until > self.now and hero.stacks >= 3 and hero.back and hero.shield > 0:
            # planted: a stunned hero's action rate reads 0 (design: its unstunned rate)
            enemy_rate = 0.0 if self.bugs.crash_skill_combo else 1.0 / enemy.cooldown
            enemy.stunned_until += (enemy.stunned_until - self.now) * (1.0 / hero.cooldown) / enemy_rate * 0.25

    # ----- turns -------------------------------------------------------------------------------
    def _ai_turn(self, unit: Unit) -> None:
        if unit.is_hero:
            unit.back = False  # the AI fights from the front row
            for slot, skill in enumerate(unit.skills):
                if skill.kind == "war_cry" and unit.stacks >= self.rules.max_war_cry_stacks:
                    continue  # the AI keeps to the designed cap
                if self._cast(unit, slot):
                    return
        self._basic_attack(unit, prefer_hero=unit.is_hero)

    def _controlled_turn(self, hero: Unit, action: int) -> None:
        if action == 0 or action == 1:
            self._basic_attack(hero, prefer_hero=action == 0)
        elif 2 <= action <= 5:
            self._cast(hero, action - 2)
        elif action == 6:
            hero.defending = True
        elif action == 7:
            squad_standing = self.squad(hero.side).hp > 0
            if hero.back or squad_standing or self.bugs.stuck_battle:  # planted: may hide with no soldiers
                hero.back = not hero.back
        else:
            raise ValueError(f"action must be in 0..{NUM_ACTIONS - 1}, got {action}")

    def _turn(self, unit: Unit) -> None:
        unit.defending = False
        if unit.stacks and self.now - unit.stacked_at > self.rules.war_cry_fade_seconds:
            unit.stacks = 0  # war cry stacks fade unless renewed
        if unit.shield > 0 and self.now >= unit.shield_until:
            unit.shield = 0.0
        if unit is self.units[0] and self.controller is not None and len(self.result.actions) < self.max_decisions:
            self.result.signatures.add(self.signature())
            action = self.controller(self.observation(), len(self.result.actions))
            if action is not None:
                self.result.actions.append(int(action))
                self._controlled_turn(unit, int(action))
                return
        self._ai_turn(unit)

    def _symptom(self, name: str, detail: str) -> None:
        if self.result.symptom is None:
            self.result.symptom, self.result.detail = name, detail

    def _check_invariants(self) -> None:
        for unit in self.units:
            if unit.hp > unit.max_hp * (1 + 1e-9):
                self._symptom("health_above_maximum", f"{'hero' if unit.is_hero else 'squad'} of side {unit.side} "
                                                      f"at {unit.hp:.0f} of {unit.max_hp:.0f}")
        if self.now - self.last_damage >= self.rules.stuck_seconds and self.standing(0) and self.standing(1):
            self._symptom("stuck", f"no damage for {self.now - self.last_damage:.1f} s")

    def run(self) -> BattleResult:
        """Plays the battle to its end (or its first bug symptom) and returns the result."""
        queue = [(unit.cooldown * (0.5 + 0.5 * self.rng.random()), index, index) for index, unit in enumerate(self.units)]
        heapq.heapify(queue)
        sequence = len(queue)
        limit = self.rules.time_limit
        try:
            while queue and self.result.symptom is None:
                time, _, index = heapq.heappop(queue)
                if time > limit:
                    break
                unit = self.units[index]
                if unit.hp <= 0:
                    continue
                self.now = time
                if time < unit.stunned_until:
                    heapq.heappush(queue, (unit.stunned_until, sequence, index))
                    sequence += 1
                    continue
                self._turn(unit)
                self._check_invariants()
                if self.fallen and not (self.standing(0) and self.standing(1)):
                    break
                heapq.heappush(queue, (time + unit.cooldown, sequence, index))
                sequence += 1
        except Exception as error:  # a crash is a finding, not the end of the tester
            self._symptom("crash", f"{type(error).__name__}: {error}")
        return self._finish()

    def _finish(self) -> BattleResult:
        result = self.result
        result.time = self.now
        strengths, resources = [], []
        for side, team in enumerate(self.teams):
            hero, squad = self.hero(side), self.squad(side)
            total = hero.max_hp + squad.max_hp
            strengths.append((max(hero.hp, 0.0) + max(squad.hp, 0.0)) / total)
            resources.append(team.hero_value * min(max(hero.hp, 0.0) / hero.max_hp, 1.0)
                             + team.soldier_cost * squad.alive_soldiers())
        result.remaining_strength = (strengths[0], strengths[1])
        result.remaining_resources = (resources[0], resources[1])
        standing = (self.standing(0), self.standing(1))
        result.winner = 0 if standing == (True, False) else 1 if standing == (False, True) else -1
        return result
