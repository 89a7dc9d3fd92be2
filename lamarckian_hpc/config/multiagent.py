"""Settings of multi-agent training (several policies in one run) and of an AlphaStar-style league.

They are sections of their own rather than fields of `RunConfig`: a single-agent run never reads
them, and the multi-agent trainer and the league take them as arguments next to a `PPOConfig`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .base import Section


class MultiAgentConfig(Section):
    policies: tuple[str, ...] = Field(("main",), min_length=1, description="Policy ids of the run.")
    policies_to_train: tuple[str, ...] | None = Field(
        None, description="Policies that learn; the others stay frozen. Default: all of them.")
    mapping: Literal["random", "round_robin"] = Field(
        "random", description="Built-in policy-mapping function used when none is passed in code.")
    shared_layers: int = Field(
        0, ge=0, description="Leading policy layers shared by all trained policies (0: none shared).")
    centralized_critic: bool = Field(
        False, description="Critics also read a global state (env state() or all observations); policies act "
                           "on their own observation.")

    @model_validator(mode="after")
    def _known_policies(self) -> MultiAgentConfig:
        if len(set(self.policies)) != len(self.policies):
            raise ValueError(f"policies: ids must be unique, got {list(self.policies)}")
        unknown = set(self.policies_to_train or ()) - set(self.policies)
        if unknown:
            raise ValueError(f"policies_to_train: {sorted(unknown)} not in policies {list(self.policies)}")
        if self.centralized_critic and not self.trained:
            raise ValueError("centralized_critic: no policy is trained, so no critic would use the global state")
        return self

    @property
    def trained(self) -> tuple[str, ...]:
        return self.policies if self.policies_to_train is None else self.policies_to_train


class LeagueConfig(Section):
    main_agents: int = Field(1, ge=1, le=16, description="Main agents (trained for the whole run).")
    main_exploiters: int = Field(1, ge=0, le=16, description="Exploiters of the main agents.")
    league_exploiters: int = Field(1, ge=0, le=16, description="Exploiters of the whole league.")
    capacity: int = Field(64, ge=4, le=4096, description="Most members (learners and snapshots) stored.")
    snapshot_interval: int = Field(
        20, ge=1, description="Updates between frozen snapshots of a main agent added to the league.")
    exploiter_max_updates: int = Field(
        40, ge=1, description="Updates after which an exploiter is snapshot and reset even if it still loses.")
    exploiter_win_rate: float = Field(
        0.7, gt=0, le=1, description="Win rate against its targets at which an exploiter is snapshot early.")
    self_play_fraction: float = Field(
        0.35, ge=0, le=1, description="Share of a main agent's games against the current main agents.")
    pfsp_exponent: float = Field(2.0, gt=0, description="p of f_hard(x) = (1-x)^p.")
    league_exploiter_reset_probability: float = Field(
        0.25, ge=0, le=1, description="Chance that a league exploiter restarts from scratch after a snapshot.")
    elo_k: float = Field(16.0, gt=0, description="Elo K-factor of rating updates.")
    payoff_decay: float = Field(
        0.99, gt=0, le=1, description="Factor on a pair's past results before each new one (recent games count most).")

    @model_validator(mode="after")
    def _fits(self) -> LeagueConfig:
        learners = self.main_agents + self.main_exploiters + self.league_exploiters
        if learners >= self.capacity:
            raise ValueError(f"capacity: {self.capacity} leaves no room for snapshots of {learners} learners")
        return self
