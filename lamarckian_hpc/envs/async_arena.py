"""A small asynchronous game: players collect coins in an arena, each at its own tick rate, and the
world never waits for anyone.

This is the kind of game the asynchronous MDP interface exists for. The world advances on its own
clock, one world tick per `tick()`; a player with period k may act on every k-th world tick after
it joined. A player whose action has not arrived when its turn comes (a slow client, a lost
message, a stalled controller) is idle for that turn: the world moves on without it and counts
the idle turn, and after `idle_timeout` idle turns in a row the player is disconnected (its
episode ends truncated). Players can connect and disconnect at any world tick.

`ArenaCore` is the game itself (plain Python, no MDP); `AsyncArenaMDP` puts it behind the MDP
interface: it is always ready to tick, consumes only the actions of players whose turn it is,
and answers only those players, so a fast player's controller resumes every tick while a slow
one's waits for its turn. `lag(player, ticks)` withholds a player's actions from the world for a
while, as a network would, to make a player idle on purpose.

`make_mdp(**kwargs)` is what `env.id: mdp:lamarckian_hpc.envs.async_arena` makes: the settings of
`ArenaSettings` (players and their periods, who joins when, network lag and late actions per
player, board, coins, idle timeout, episode length), checked with one line naming a bad one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..mdp import MDP, AgentId, StepOutcome

#: stay, up, down, left, right
MOVES = ((0, 0), (0, 1), (0, -1), (-1, 0), (1, 0))
OBSERVATION_SIZE = 5


@dataclass
class Player:
    name: str
    period: int
    x: int
    y: int
    joined_at: int
    score: float = 0.0
    reward: float = 0.0  # collected since the player's last consumed action
    actions_taken: int = 0
    idle_turns: int = 0  # turns missed in a row
    idle_total: int = 0
    pending: int | None = None


@dataclass
class ArenaCore:
    width: int = 12
    height: int = 12
    num_coins: int = 6
    idle_timeout: int = 50
    seed: int = 0
    clock: int = 0
    players: dict[str, Player] = field(default_factory=dict)
    #: players that left at the last tick and why ("timeout" or "disconnected")
    departed: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)
        # Who moves first within a tick, drawn anew every tick: in connection order, the first
        # player would win every race to a coin, and two players chasing the same coins would
        # split them by when they connected rather than by how they play.
        self.order_rng = np.random.default_rng((self.seed, 2))
        self.coins = [self._free_cell() for _ in range(self.num_coins)]

    def _free_cell(self) -> tuple[int, int]:
        return int(self.rng.integers(self.width)), int(self.rng.integers(self.height))

    def connect(self, name: str, period: int = 1) -> Player:
        if name in self.players:
            raise ValueError(f"player {name!r} is already connected")
        if period < 1:
            raise ValueError(f"period must be >= 1 world ticks, got {period}")
        player = Player(name, period, *self._free_cell(), joined_at=self.clock)
        self.players[name] = player
        return player

    def disconnect(self, name: str) -> None:
        if self.players.pop(name, None) is not None:
            self.departed[name] = "disconnected"

    def submit(self, name: str, action: int) -> None:
        """A player's next action; it is used at the player's next turn (a later one replaces it)."""
        if not 0 <= int(action) < len(MOVES):
            raise ValueError(f"action must be in 0..{len(MOVES) - 1}, got {action}")
        self.players[name].pending = int(action)

    def due(self, player: Player) -> bool:
        """Whether the coming world tick is one of the player's turns."""
        return (self.clock + 1 - player.joined_at) % player.period == 0

    def advance(self) -> list[str]:
        """One world tick; returns the players whose action was consumed. Never waits for anyone."""
        self.clock += 1
        self.departed = {}
        acted: list[str] = []
        players = list(self.players.values())
        order = [players[i] for i in self.order_rng.permutation(len(players))] if len(players) > 1 else players
        for player in order:
            if (self.clock - player.joined_at) % player.period:
                continue
            if player.pending is None:
                player.idle_turns += 1
                player.idle_total += 1
                if player.idle_turns >= self.idle_timeout:
                    del self.players[player.name]
                    self.departed[player.name] = "timeout"
                continue
            dx, dy = MOVES[player.pending]
            player.pending, player.idle_turns = None, 0
            player.x = min(max(player.x + dx, 0), self.width - 1)
            player.y = min(max(player.y + dy, 0), self.height - 1)
            player.actions_taken += 1
            if (player.x, player.y) in self.coins:
                self.coins[self.coins.index((player.x, player.y))] = self._free_cell()
                player.score += 1.0
                player.reward += 1.0
            acted.append(player.name)
        return acted

    def observation(self, name: str) -> np.ndarray:
        """Own position, offset to the nearest coin (all scaled to about [-1, 1]) and own period."""
        player = self.players[name]
        offsets = [(cx - player.x, cy - player.y) for cx, cy in self.coins] or [(0, 0)]
        dx, dy = min(offsets, key=lambda o: abs(o[0]) + abs(o[1]))
        return np.array((2 * player.x / max(self.width - 1, 1) - 1, 2 * player.y / max(self.height - 1, 1) - 1,
                         dx / self.width, dy / self.height, 1.0 / player.period), dtype=np.float32)


class AsyncArenaMDP(MDP):
    """The arena behind the MDP interface. `players` maps names to periods at the episode's start;
    `joins` maps world ticks to players that connect then; an episode lasts `max_ticks`.
    `join_lag` withholds a player's actions for that many world ticks after it connects (a slow
    link; more than `idle_timeout` of its turns and it is dropped), and `late_probability` is the
    chance that a player's action misses one of its turns (the player idles for that turn)."""

    agents_join_mid_episode = True

    def __init__(self, players: dict[str, int], joins: dict[int, dict[str, int]] | None = None,
                 max_ticks: int = 200, idle_timeout: int = 50, seed: int = 0,
                 join_lag: dict[str, int] | None = None, late_probability: dict[str, float] | None = None,
                 **arena: int) -> None:
        super().__init__()
        self.start_players, self.joins = dict(players), dict(joins or {})
        self.max_ticks, self.idle_timeout, self.arena, self.seed = max_ticks, idle_timeout, arena, seed
        self.join_lag, self.late_probability = dict(join_lag or {}), dict(late_probability or {})
        self.core = ArenaCore(idle_timeout=idle_timeout, seed=seed, **arena)
        self._late_rng = np.random.default_rng(seed)
        self._episode_seeds: np.random.Generator | None = None  # seeds of the episodes reset without one
        self._lag: dict[str, int] = {}  # world tick until which a player's actions are withheld
        self._last: dict[str, np.ndarray] = {}
        # One object each (every player has the same spaces), so that seeding one seeds what later
        # calls return, as PettingZoo asks of its environments' space methods.
        self._observation_space = gym.spaces.Box(-1.0, 1.0, (OBSERVATION_SIZE,), np.float32)
        self._action_space = gym.spaces.Discrete(len(MOVES))

    @property
    def possible_agents(self) -> list[AgentId]:
        """Every player an episode may have: those at the start, then those who join."""
        return [*self.start_players, *(name for joining in self.joins.values() for name in joining)]

    def reset(self, seed: int | None = None) -> None:
        """A new episode: a given seed makes it repeat; without one, the next seed of the stream the
        last given seed (or the constructor's) started, so episodes differ as a Gymnasium env's do."""
        if seed is not None or self._episode_seeds is None:
            seed = self.seed if seed is None else seed
            self._episode_seeds = np.random.default_rng(seed)
        else:
            seed = int(self._episode_seeds.integers(2**31))
        self.core = ArenaCore(idle_timeout=self.idle_timeout, seed=seed, **self.arena)
        self._late_rng = np.random.default_rng((seed, 1))
        self.pending_actions.clear()
        self._lag.clear()
        for name, period in self.start_players.items():
            self._connect(name, period)

    def _connect(self, name: str, period: int) -> None:
        self.core.connect(name, period)
        if self.join_lag.get(name):
            self.lag(name, self.join_lag[name])

    def agent_ids(self) -> list[AgentId]:
        return list(self.core.players)

    @property
    def episode_over(self) -> bool:
        return not self.core.players or self.core.clock >= self.max_ticks

    def observation(self, agent_id: AgentId) -> np.ndarray:
        return self.core.observation(agent_id)

    def ready(self) -> bool:
        """The world advances every tick, whoever has or has not acted."""
        return True

    def lag(self, player: str, ticks: int) -> None:
        """Withhold the player's actions from the world for the next `ticks` world ticks."""
        self._lag[player] = self.core.clock + ticks

    def tick(self) -> dict[AgentId, StepOutcome]:
        core = self.core
        for name, action in self.pending_actions.items():
            if name in core.players and self._lag.get(name, -1) <= core.clock:
                player = core.players[name]
                if player.pending is None and core.due(player):
                    late = self.late_probability.get(name, 0.0)
                    if late and self._late_rng.random() < late:
                        continue  # the action misses this turn; it stays pending for the next
                    core.submit(name, action)
        acted = core.advance()
        over = core.clock >= self.max_ticks
        outcomes: dict[AgentId, StepOutcome] = {}
        for name in acted:
            player = core.players[name]
            outcomes[name] = StepOutcome(core.observation(name), player.reward, False, over,
                                         {"clock": core.clock, "idle_total": player.idle_total})
            player.reward = 0.0
        for name, why in core.departed.items():  # timed out or disconnected: their episode ends
            if name in self.pending_actions:
                outcomes[name] = StepOutcome(self._last.get(name, np.zeros(OBSERVATION_SIZE, np.float32)), 0.0, False,
                                             True, {"clock": core.clock, "left": why})
        if over:  # every player still waiting for its turn is truncated with the episode
            for name in core.players:
                if name not in outcomes and name in self.pending_actions:
                    outcomes[name] = StepOutcome(core.observation(name), core.players[name].reward, False, True,
                                                 {"clock": core.clock})
            core.players.clear()
        else:
            for name, period in self.joins.get(core.clock, {}).items():
                self._connect(name, period)
        for name in core.players:
            self._last[name] = core.observation(name)
        return outcomes

    def observation_space(self, agent_id: AgentId) -> gym.Space:
        return self._observation_space

    def action_space(self, agent_id: AgentId) -> gym.Space:
        return self._action_space


class Joining(BaseModel):
    """A player that connects mid-episode."""

    model_config = ConfigDict(extra="forbid")
    at: int = Field(ge=1, description="World tick at which the player connects.")
    period: int = Field(1, ge=1, description="World ticks between the player's turns.")


class ArenaSettings(BaseModel):
    """`env.kwargs` of the arena (`env.id: mdp:lamarckian_hpc.envs.async_arena`)."""

    model_config = ConfigDict(extra="forbid")
    players: dict[str, int] = Field(
        default_factory=lambda: {"fast": 1, "slow": 4}, min_length=1,
        description="Players at the episode's start and their periods (world ticks between their turns, >= 1).")
    joins: dict[str, Joining] = Field(
        default_factory=dict, description="Players that connect mid-episode: {name: {at: tick, period: ticks}}.")
    lag: dict[str, int] = Field(
        default_factory=dict, description="World ticks a player's actions are withheld after it connects "
                                          "(a slow link; past idle_timeout of its turns it is dropped).")
    late_probability: dict[str, float] = Field(
        default_factory=dict, description="Chance in [0, 1) that a player's action misses one of its turns.")
    num_coins: int = Field(6, ge=1, le=1000, description="Coins on the board (a collected one reappears elsewhere).")
    width: int = Field(12, ge=2, le=1000, description="Board width in cells.")
    height: int = Field(12, ge=2, le=1000, description="Board height in cells.")
    idle_timeout: int = Field(50, ge=1, description="Missed turns in a row after which a player is dropped.")
    max_ticks: int = Field(200, ge=1, description="World ticks per episode.")

    @model_validator(mode="after")
    def _consistent(self) -> ArenaSettings:
        for name, period in self.players.items():
            if period < 1:
                raise ValueError(f"players.{name}: period must be >= 1 world ticks, got {period}")
        if clash := sorted(set(self.players) & set(self.joins)):
            raise ValueError(f"joins: {clash} already play from the start (players)")
        late_joins = sorted(name for name, joining in self.joins.items() if joining.at >= self.max_ticks)
        if late_joins:
            raise ValueError(f"joins: {late_joins} join at or after max_ticks={self.max_ticks}, so never play")
        known = {*self.players, *self.joins}
        for field_name in ("lag", "late_probability"):
            if unknown := sorted(set(getattr(self, field_name)) - known):
                raise ValueError(f"{field_name}: {unknown} are not players; players: {sorted(known)}")
        for name, ticks in self.lag.items():
            if ticks < 0:
                raise ValueError(f"lag.{name}: must be >= 0 world ticks, got {ticks}")
        for name, chance in self.late_probability.items():
            if not 0 <= chance < 1:
                raise ValueError(f"late_probability.{name}: must be in [0, 1), got {chance}")
        return self


def _one_line(error: ValidationError) -> str:
    """The first problem of a validation error as `env.kwargs.<field>: <what is wrong>`."""
    problem = error.errors()[0]
    where = ".".join(str(part) for part in problem["loc"])
    if problem["type"] == "extra_forbidden":
        of_what, fields = ("the arena", ArenaSettings.model_fields) if len(problem["loc"]) == 1 else \
            ("a joining player", Joining.model_fields)
        return f"env.kwargs.{where}: not a setting of {of_what}; allowed: {', '.join(fields)}"
    message = problem["msg"].removeprefix("Value error, ")
    return f"env.kwargs.{where}: {message}" if where else f"env.kwargs.{message}"


def arena_settings(**kwargs: Any) -> ArenaSettings:
    """`env.kwargs` checked; ValueError with one line naming the bad setting."""
    try:
        return ArenaSettings(**kwargs)
    except ValidationError as error:
        raise ValueError(_one_line(error)) from None


def make_mdp(**kwargs: Any) -> AsyncArenaMDP:
    """The arena of `env.id: mdp:lamarckian_hpc.envs.async_arena`, from its `env.kwargs`."""
    settings = arena_settings(**kwargs)
    joins: dict[int, dict[str, int]] = {}
    for name, joining in settings.joins.items():
        joins.setdefault(joining.at, {})[name] = joining.period
    return AsyncArenaMDP(settings.players, joins, settings.max_ticks, settings.idle_timeout,
                         join_lag=settings.lag, late_probability=settings.late_probability,
                         width=settings.width, height=settings.height, num_coins=settings.num_coins)
