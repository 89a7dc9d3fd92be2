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
"""

from __future__ import annotations

from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np

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
        for player in list(self.players.values()):
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
    `joins` maps world ticks to players that connect then; an episode lasts `max_ticks`."""

    agents_join_mid_episode = True

    def __init__(self, players: dict[str, int], joins: dict[int, dict[str, int]] | None = None,
                 max_ticks: int = 200, idle_timeout: int = 50, seed: int = 0, **arena: int) -> None:
        super().__init__()
        self.start_players, self.joins = dict(players), dict(joins or {})
        self.max_ticks, self.idle_timeout, self.arena, self.seed = max_ticks, idle_timeout, arena, seed
        self.core = ArenaCore(idle_timeout=idle_timeout, seed=seed, **arena)
        self._lag: dict[str, int] = {}  # world tick until which a player's actions are withheld
        self._last: dict[str, np.ndarray] = {}
        # One object each (every player has the same spaces), so that seeding one seeds what later
        # calls return, as PettingZoo asks of its environments' space methods.
        self._observation_space = gym.spaces.Box(-1.0, 1.0, (OBSERVATION_SIZE,), np.float32)
        self._action_space = gym.spaces.Discrete(len(MOVES))

    def reset(self, seed: int | None = None) -> None:
        self.core = ArenaCore(idle_timeout=self.idle_timeout, seed=self.seed if seed is None else seed, **self.arena)
        for name, period in self.start_players.items():
            self.core.connect(name, period)
        self.pending_actions.clear()
        self._lag.clear()

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
                core.connect(name, period)
        for name in core.players:
            self._last[name] = core.observation(name)
        return outcomes

    def observation_space(self, agent_id: AgentId) -> gym.Space:
        return self._observation_space

    def action_space(self, agent_id: AgentId) -> gym.Space:
        return self._action_space
