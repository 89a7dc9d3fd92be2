"""The config of a league run of `lamarckian-hpc evolve` (`algorithm.name: league`): an AlphaStar
league (main agents, main exploiters, league exploiters, each a PPO learner, and their frozen
snapshots) on a two-player PettingZoo game (parallel, or turn-based AEC), run on the population workflow: the learners
live in the workers, on every node of the cluster."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from .base import RootSection, Section, StorageConfig
from .multiagent import LeagueConfig
from .population import CoLocatedTrainingRuntimeConfig
from .train import PETTINGZOO_PREFIX, EnvConfig, ModelConfig, PPOConfig

TWO_PLAYER_PONG = "pettingzoo:lamarckian_hpc.envs.pong_two_player"


def _two_player_pong() -> EnvConfig:
    return EnvConfig(id=TWO_PLAYER_PONG, num_envs=8)


class LeagueAlgorithmConfig(Section):
    name: Literal["league"] = Field("league", description="EvoRL algorithm: league (AlphaStar's league of PPO "
                                                          "learners).")
    generations: int = Field(60, ge=1, description="Rounds in which every learner makes one PPO update against the "
                                                   "opponent matchmaking chose for it.")
    seats: tuple[str, str] = Field(("right", "left"), description="The game's agent ids: the learner's seat, then "
                                                                  "its opponent's.")
    alternate_seats: bool = Field(False, description="Learner and opponent swap seats every game (board games, "
                                                     "where moving first matters); false: the learner keeps "
                                                     "seats[0].")
    scripted_evaluation_interval: int = Field(
        10, ge=0, description="Every this many generations the main agents play the scripted opponent, which "
                              "they never train against (0: never).")
    scripted_evaluation_episodes: int = Field(10, ge=1, description="Episodes of each scripted evaluation.")
    scripted_opponent: Literal["pong", "random"] = Field(
        "pong", description="The scripted opponent: pong (the scripted player of lamarckian/Pong-v0) or random "
                            "(a uniformly random legal player of the league's own game, seats alternating).")
    scripted_opponent_skill: float = Field(0.6, ge=0, le=1, description="Skill of the scripted Pong player.")


class LeagueRunConfig(RootSection):
    """A run of `lamarckian-hpc evolve` with `algorithm.name: league`."""

    seed: int = Field(0, ge=0, description="Seed of every random generator of the run.")
    env: EnvConfig = Field(default_factory=_two_player_pong)
    model: ModelConfig = Field(default_factory=ModelConfig)
    ppo: PPOConfig = Field(default_factory=PPOConfig)
    league: LeagueConfig = Field(default_factory=LeagueConfig)
    algorithm: LeagueAlgorithmConfig = Field(default_factory=LeagueAlgorithmConfig)
    runtime: CoLocatedTrainingRuntimeConfig = Field(default_factory=CoLocatedTrainingRuntimeConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)

    @field_validator("env", mode="before")
    @classmethod
    def _two_player_pong_by_default(cls, section: Any) -> Any:
        """An env section without an id plays the default game, not train's CartPole."""
        if isinstance(section, dict) and "id" not in section:
            section = {"id": TWO_PLAYER_PONG, **section}
        return section

    @model_validator(mode="after")
    def _two_player_game(self) -> LeagueRunConfig:
        if not self.env.id.startswith(PETTINGZOO_PREFIX):
            raise ValueError(f"env.id: a league plays a two-player PettingZoo game (pettingzoo:<module>, e.g. "
                             f"pettingzoo:lamarckian_hpc.envs.pong_two_player), got {self.env.id!r}")
        algorithm = self.algorithm
        pong_only = algorithm.scripted_opponent == "pong" and algorithm.scripted_evaluation_interval
        if pong_only and self.env.id != TWO_PLAYER_PONG:
            raise ValueError(f"algorithm.scripted_opponent: pong measures {TWO_PLAYER_PONG} only, the env is "
                             f"{self.env.id!r}; use random (or algorithm.scripted_evaluation_interval=0)")
        if self.algorithm.seats[0] == self.algorithm.seats[1]:
            raise ValueError(f"algorithm.seats must name two different agents, got {list(self.algorithm.seats)}")
        return self
