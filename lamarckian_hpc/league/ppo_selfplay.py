"""PPO self-play through the league on a two-player parallel environment (the vector Pong).

One main agent learns with PPO on one side of every game; the other side is played by a frozen
"opponent" policy whose weights are those of the league member `League.choose_opponent` picks
before each update: the current main agent itself (plain self-play) or a snapshot chosen by PFSP.
The main agent's snapshots join the league every `league.snapshot_interval` updates. Each finished
game is recorded in the payoff matrix against the opponent that was playing when it ended (a game
that straddles an opponent switch counts for the later one). Exploiters are not trained here:
`league.main_exploiters` and `league.league_exploiters` must be 0.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

import gymnasium as gym
import numpy as np
import torch

from ..config import LeagueConfig, ModelConfig, MultiAgentConfig, PPOConfig
from ..models import ActorCritic
from ..multiagent import MultiAgentTrainer, ParallelEnvMDP, fixed_mapping
from .league import League, Role

MAIN, OPPONENT = "main", "opponent"


def _weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


class LeagueSelfPlay:
    def __init__(self, make_env: Callable[[], Any], num_envs: int, league: LeagueConfig, ppo: PPOConfig,
                 model: ModelConfig, seed: int = 0, sides: tuple[str, str] = ("right", "left")) -> None:
        if league.main_exploiters or league.league_exploiters or league.main_agents != 1:
            raise ValueError("league self-play trains one main agent: set league.main_agents=1, "
                             "league.main_exploiters=0 and league.league_exploiters=0")
        mdps = [ParallelEnvMDP(make_env()) for _ in range(num_envs)]
        config = MultiAgentConfig(policies=(MAIN, OPPONENT), policies_to_train=(MAIN,))
        self.trainer = MultiAgentTrainer(mdps, config, ppo, model, seed,
                                         mapping_fn=fixed_mapping({sides[0]: MAIN, sides[1]: OPPONENT}))
        self.main_model, self.opponent_model = self.trainer.models[MAIN], self.trainer.models[OPPONENT]
        self.league = League(league, _weights(self.main_model), seed=seed)
        self.main = self.league.of_role(Role.MAIN_AGENT)[0]
        self.opponent = self.main
        self.opponents_chosen: list[tuple[int, str]] = []

    def update(self) -> dict[str, float]:
        """Choose an opponent, sample until the main agent has a batch, update it, record the games."""
        self.opponent, how = self.league.choose_opponent(self.main)
        self.opponents_chosen.append((self.opponent, how))
        source = self.main_model.state_dict() if self.opponent == self.main else self.league.members[self.opponent].params
        self.opponent_model.load_state_dict(source)
        diagnostics = self.trainer.step().get(MAIN, {})
        returns = np.array([r.episode_return for r in self.trainer.last_completed if r.policy_id == MAIN])
        if len(returns):
            self.league.record(self.main, self.opponent, float((returns > 0).sum()), float((returns == 0).sum()),
                               float((returns < 0).sum()))
        self.league.after_update(self.main, _weights(self.main_model))
        return diagnostics

    def close(self) -> None:
        self.trainer.close()


def evaluate_against_scripted(model: ActorCritic, episodes: int, seed: int = 0, **env_kwargs: Any) -> float:
    """Mean return (points won minus lost) of `model` on `lamarckian/Pong-v0` against its scripted player."""
    env = gym.make("lamarckian/Pong-v0", **env_kwargs)
    total = 0.0
    try:
        for episode in range(episodes):
            observation, _ = env.reset(seed=seed + episode)
            done = False
            while not done:
                with torch.inference_mode():
                    action, _ = model.act(torch.as_tensor(observation[None], dtype=torch.float32))
                observation, reward, terminated, truncated, _ = env.step(int(action[0]))
                total += float(reward)
                done = terminated or truncated
    finally:
        env.close()
    return total / episodes


def snapshot_model(league: League, index: int, template: ActorCritic) -> ActorCritic:
    """A copy of `template` carrying the weights of league member `index`."""
    model = copy.deepcopy(template)
    model.load_state_dict(league.members[index].params)
    return model
