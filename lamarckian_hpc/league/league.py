"""An AlphaStar-style league: learners (main agents, main exploiters, league exploiters) and the
frozen snapshots they leave behind, with matchmaking by PFSP and self-play.

The league decides who plays whom and when members are added or reset; it does not train anyone.
A trainer asks `choose_opponent(learner)` for each game, reports results with `record`, and after
each update of a learner calls `after_update(learner, params)`, which adds snapshots and resets
exploiters on the schedule. Parameters are opaque to the league (a state dict, an array of
logits): it only keeps copies of them for its frozen members.

Matchmaking, after AlphaStar's pseudocode:
- a main agent plays the current main agents (plain self-play) with probability
  `self_play_fraction`, otherwise a frozen member chosen by PFSP with f_hard over all snapshots;
- a main exploiter plays a main agent when it wins at least 10% against it, otherwise a snapshot
  of that main agent chosen with f_var (games it can sometimes win);
- a league exploiter plays a frozen member chosen with f_hard over all snapshots.
A main agent is snapshot every `snapshot_interval` of its updates. An exploiter is snapshot when
it beats its targets with `exploiter_win_rate` or after `exploiter_max_updates` updates; then a
main exploiter always restarts from the initial parameters, a league exploiter with probability
`league_exploiter_reset_probability`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np

from ..config import LeagueConfig
from .payoff import PayoffMatrix, elo_update
from .pfsp import pfsp_probabilities

#: AlphaStar's threshold under which a main exploiter trains on snapshots of its target instead.
MAIN_EXPLOITER_MIN_WIN_RATE = 0.1
INITIAL_ELO = 1000.0


class Role(IntEnum):
    MAIN_AGENT = 0
    MAIN_EXPLOITER = 1
    LEAGUE_EXPLOITER = 2
    SNAPSHOT = 3


@dataclass
class Member:
    index: int
    name: str
    role: Role
    params: Any
    parent: int = -1  # for a snapshot: the learner it was taken from
    created_update: int = 0  # league update count when it joined
    updates: int = 0  # a learner's updates since its last snapshot or reset

    @property
    def frozen(self) -> bool:
        return self.role == Role.SNAPSHOT


@dataclass
class LeagueEvent:
    kind: str  # "snapshot" or "reset"
    learner: int
    member: int  # the new snapshot's index (the learner's own index for a reset)


@dataclass
class League:
    config: LeagueConfig
    initial_params: Any
    seed: int = 0
    members: list[Member] = field(default_factory=list)

    def __post_init__(self) -> None:
        config = self.config
        self.rng = np.random.default_rng(self.seed)
        self.payoff = PayoffMatrix(config.capacity, config.payoff_decay)
        self.elo = np.full(config.capacity, INITIAL_ELO)
        self.update_count = 0
        self.events: list[LeagueEvent] = []
        self._by_role: dict[Role, list[int]] = {}
        for role, count, stem in ((Role.MAIN_AGENT, config.main_agents, "main"),
                                  (Role.MAIN_EXPLOITER, config.main_exploiters, "main_exploiter"),
                                  (Role.LEAGUE_EXPLOITER, config.league_exploiters, "league_exploiter")):
            for k in range(count):
                self._add(f"{stem}_{k}", role, copy.deepcopy(self.initial_params))
        # The league starts with a frozen copy of the initial policy, so PFSP has a candidate.
        self._add("main_0@0", Role.SNAPSHOT, copy.deepcopy(self.initial_params), parent=0)

    # ------------------------------------------------------------------ membership
    def _add(self, name: str, role: Role, params: Any, parent: int = -1) -> Member:
        if len(self.members) >= self.config.capacity:
            raise RuntimeError(f"the league is full: league.capacity={self.config.capacity} members")
        member = Member(len(self.members), name, role, params, parent, self.update_count)
        self.members.append(member)
        self._by_role.setdefault(role, []).append(member.index)
        return member

    @property
    def learners(self) -> list[int]:
        return [m.index for m in self.members if not m.frozen]

    def of_role(self, role: Role) -> list[int]:
        """Indices of the members of one role (a list kept up to date, not to be modified)."""
        return self._by_role.get(role, [])

    @property
    def snapshots(self) -> list[int]:
        return self.of_role(Role.SNAPSHOT)

    @property
    def full(self) -> bool:
        return len(self.members) >= self.config.capacity

    # ------------------------------------------------------------------ matchmaking
    def _pfsp(self, learner: int, candidates: list[int], weighting: str) -> int:
        probabilities = pfsp_probabilities(self.payoff.win_rate(learner, candidates), weighting,  # type: ignore[arg-type]
                                           self.config.pfsp_exponent)
        # Inverse-CDF draw: Generator.choice with p= validates p on every call and costs several times more.
        pick = int(np.searchsorted(np.cumsum(probabilities), self.rng.random() * probabilities.sum(), side="right"))
        return candidates[min(pick, len(candidates) - 1)]

    def choose_opponent(self, learner: int) -> tuple[int, str]:
        """An opponent for one game of `learner`, and how it was chosen ("self_play", "pfsp_hard",
        "pfsp_var" or "main")."""
        member = self.members[learner]
        mains = self.of_role(Role.MAIN_AGENT)
        if member.role == Role.MAIN_AGENT:
            if self.rng.random() < self.config.self_play_fraction:
                return mains[int(self.rng.integers(len(mains)))], "self_play"
            return self._pfsp(learner, self.snapshots, "hard"), "pfsp_hard"
        if member.role == Role.MAIN_EXPLOITER:
            target = mains[int(self.rng.integers(len(mains)))]
            target_snapshots = [k for k in self.snapshots if self.members[k].parent == target]
            if self.payoff.win_rate(learner, [target])[0] >= MAIN_EXPLOITER_MIN_WIN_RATE or not target_snapshots:
                return target, "main"
            return self._pfsp(learner, target_snapshots, "variance"), "pfsp_var"
        if member.role == Role.LEAGUE_EXPLOITER:
            return self._pfsp(learner, self.snapshots, "hard"), "pfsp_hard"
        raise ValueError(f"member {learner} ({member.name}) is a frozen snapshot and does not train")

    def record(self, a: int, b: int | np.ndarray, wins: float | np.ndarray, draws: float | np.ndarray,
               losses: float | np.ndarray) -> None:
        """Results of games of a against b, or against an array of distinct opponents (counts, or
        expected values for mixed strategies). Games of a learner against itself are not recorded."""
        b = np.atleast_1d(np.asarray(b, dtype=np.int64))
        if len(np.unique(b)) != len(b):
            raise ValueError(f"record takes distinct opponents per call (sum repeated games first), got {b.tolist()}")
        wins, draws, losses = (np.broadcast_to(np.asarray(v, dtype=np.float64), b.shape) for v in (wins, draws, losses))
        keep = (b != a) & ((wins + draws + losses) > 0)
        if not keep.any():
            return
        b, wins, draws, losses = b[keep], wins[keep], draws[keep], losses[keep]
        self.payoff.record_outcomes(a, b, wins, draws, losses)
        elo_update(self.elo, a, b, (wins + 0.5 * draws) / (wins + draws + losses), self.config.elo_k)

    # ------------------------------------------------------------------ schedule
    def after_update(self, learner: int, params: Any) -> list[LeagueEvent]:
        """Keep the learner's current parameters; add snapshots and reset exploiters when due."""
        member = self.members[learner]
        if member.frozen:
            raise ValueError(f"member {learner} ({member.name}) is frozen; only learners are updated")
        member.params = params
        member.updates += 1
        self.update_count += 1
        config, events = self.config, []
        if member.role == Role.MAIN_AGENT:
            due = member.updates >= config.snapshot_interval
        else:
            targets = (self.of_role(Role.MAIN_AGENT) if member.role == Role.MAIN_EXPLOITER else self.snapshots)
            beats = bool(np.all(self.payoff.win_rate(learner, targets) >= config.exploiter_win_rate))
            # At least two updates: a fresh exploiter's record is too thin to call it a winner.
            due = member.updates >= config.exploiter_max_updates or (beats and member.updates >= 2)
        if due and not self.full:
            snapshot = self._add(f"{member.name}@{self.update_count}", Role.SNAPSHOT, copy.deepcopy(params), learner)
            self.elo[snapshot.index] = self.elo[learner]
            events.append(LeagueEvent("snapshot", learner, snapshot.index))
            member.updates = 0
            reset = (member.role == Role.MAIN_EXPLOITER or (member.role == Role.LEAGUE_EXPLOITER and
                     self.rng.random() < config.league_exploiter_reset_probability))
            if reset:
                member.params = copy.deepcopy(self.initial_params)
                self.payoff.reset_member(learner)
                self.elo[learner] = INITIAL_ELO
                events.append(LeagueEvent("reset", learner, learner))
        self.events.extend(events)
        return events

    # ------------------------------------------------------------------ checkpoint
    def state_dict(self) -> dict[str, Any]:
        """Members (with their parameters, which must then be plain data: arrays, numbers, dicts),
        payoff, Elo, counters and the generator, as plain data for a checkpoint."""
        return {"members": [{"index": m.index, "name": m.name, "role": int(m.role), "params": m.params,
                             "parent": m.parent, "created_update": m.created_update, "updates": m.updates}
                            for m in self.members],
                "wins": self.payoff.wins, "draws": self.payoff.draws, "games": self.payoff.games, "elo": self.elo,
                "update_count": self.update_count, "rng": self.rng.bit_generator.state,
                "events": [[event.kind, event.learner, event.member] for event in self.events]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue as the league whose `state_dict()` this is (same config)."""
        self.members, self._by_role = [], {}
        for saved in state["members"]:
            member = Member(int(saved["index"]), str(saved["name"]), Role(int(saved["role"])), saved["params"],
                            int(saved["parent"]), int(saved["created_update"]), int(saved["updates"]))
            self.members.append(member)
            self._by_role.setdefault(member.role, []).append(member.index)
        for name in ("wins", "draws", "games"):
            getattr(self.payoff, name)[:] = np.asarray(state[name], float)
        self.elo[:] = np.asarray(state["elo"], float)
        self.update_count = int(state["update_count"])
        self.rng.bit_generator.state = state["rng"]
        self.events = [LeagueEvent(str(kind), int(learner), int(member)) for kind, learner, member in state["events"]]
