"""Settings of multi-agent training (several policies in one run) and of an AlphaStar-style league.

`MultiAgentConfig` is the `multiagent:` section of a `train` config (`RunConfig.multiagent`; a
single-agent run has none) and what `MultiAgentTrainer` takes from Python; the league's section is
passed to `League` next to a `PPOConfig`. Names are checked here, imports happen where they are
used: a `module:function` mapping is only resolved by the processes that map agents.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from .base import Section

#: Built-in policy-mapping functions, by name.
BUILTIN_MAPPINGS: tuple[str, ...] = ("random", "round_robin")
#: A policy id: also a metric suffix and an HDF5 group name, so no dots, slashes or spaces.
POLICY_ID_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: `package.module:function`, a mapping function the processes import.
FUNCTION_PATTERN = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")
MAPPING_CHOICES = "random, round_robin, a map {agent_id: policy} or module:function"


class MultiAgentConfig(Section):
    policies: tuple[str, ...] = Field(("main",), min_length=1, max_length=16, description=(
        "Policy ids of the run (letters, digits, _ and -; also the suffix of their metrics in the run file)."))
    policies_to_train: tuple[str, ...] | None = Field(
        None, description="Policies that learn; the others stay frozen. Default: all of them.")
    mapping: str | dict[str, str] = Field(
        "random", description="Which policy an agent gets when it appears: random, round_robin, a map "
                              "{agent_id: policy}, or module:function, a function (agent_id, env_index) -> "
                              "policy id. Python callers may pass any function instead.")
    shared_layers: int = Field(
        0, ge=0, description="Leading policy layers shared by all trained policies (0: none shared).")
    centralized_critic: bool = Field(
        False, description="Critics also read a global state (env state() or all observations); policies act "
                           "on their own observation.")

    @field_validator("mapping", mode="before")
    @classmethod
    def _mapping_name(cls, mapping: object) -> object:
        if not isinstance(mapping, (str, dict)):
            raise ValueError(f"must be {MAPPING_CHOICES}, got a {type(mapping).__name__}")
        if isinstance(mapping, dict):
            if not mapping:
                raise ValueError(f"an empty map binds no agent; must be {MAPPING_CHOICES}")
            return mapping
        if mapping not in BUILTIN_MAPPINGS and not FUNCTION_PATTERN.fullmatch(mapping):
            raise ValueError(f"must be {MAPPING_CHOICES}")
        return mapping

    @model_validator(mode="after")
    def _known_policies(self) -> MultiAgentConfig:
        bad = [policy for policy in self.policies if not POLICY_ID_PATTERN.fullmatch(policy)]
        if bad:
            raise ValueError(f"policies: {bad} are not policy ids (1-64 letters, digits, _ or -)")
        if len(set(self.policies)) != len(self.policies):
            raise ValueError(f"policies: ids must be unique, got {list(self.policies)}")
        if isinstance(self.mapping, dict):
            unknown_targets = sorted(set(self.mapping.values()) - set(self.policies))
            if unknown_targets:
                raise ValueError(f"mapping: maps agents to {unknown_targets}, which are not in policies "
                                 f"{list(self.policies)}")
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
