"""The league learners one worker process trains (`population.worker_pool` hosts one `LeagueLearners`
per worker: in the driver's process, forked, or a Ray actor on any node).

Each learner is PPO on its seat of its own two-player games (`env.num_envs` of them; with
`algorithm.alternate_seats` the seats swap every game); the other seat is played by the opponent the league's matchmaking chose for this update, whose weights
arrive with the request (a frozen snapshot, another learner, or none: the learner itself, plain
self-play). Every game that ends during the update is one match result against that opponent; the games
`storage.trajectories` picks come back whole with the answer, for the driver to record.
Methods take and return plain data (numpy arrays, numbers, dicts), so that weights travel over a
pipe or through Ray's object store without pickling torch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .. import envs  # noqa: F401  (registers lamarckian/Pong-v0)
from ..config.league_run import LeagueRunConfig
from ..config.multiagent import MultiAgentConfig
from ..mdp import ExperienceBatch
from ..models import ActorCritic
from ..multiagent import alternating_seats_mapping, fixed_mapping
from ..population.workflow import HostedMembers
from ..rl import ppo_update
from ..rl.adam import Adam
from ..rl.batched_ppo import BatchedPPO
from ..runtime.actor.inference import TorchPolicy
from ..runtime.actor.multiagent_sampling import make_pettingzoo_mdp
from ..runtime.runners.multiagent_trainer import MultiAgentTrainer, default_spaces
from ..runtime.runners.recording import recorded_answers

LEARNER, OPPONENT = "learner", "opponent"
Weights = dict[str, np.ndarray]


def model_weights(model: torch.nn.Module) -> Weights:
    return {name: tensor.detach().cpu().numpy().copy() for name, tensor in model.state_dict().items()}


def initial_weights(config: LeagueRunConfig) -> Weights:
    """The weights every learner starts from and every reset exploiter returns to (AlphaStar's
    agents all start from one initial policy), the same in every process for a seed."""
    mdp = make_pettingzoo_mdp(config.env)
    mdp.reset(seed=config.seed)
    torch.manual_seed(config.seed)
    return model_weights(ActorCritic(*default_spaces(mdp), config.model))


def learner_spaces(config: LeagueRunConfig) -> tuple:
    """Observation and action space of a learner's seat (its recorded episodes' shapes)."""
    mdp = make_pettingzoo_mdp(config.env)
    mdp.reset(seed=config.seed)
    return default_spaces(mdp)


def returns_against_scripted(model: ActorCritic, episodes: int, seed: int = 0, **env_kwargs: Any) -> np.ndarray:
    """Each episode's return (points won minus lost) of `model` on `lamarckian/Pong-v0` against its
    scripted player, a player the league's learners never train against."""
    import gymnasium as gym

    env = gym.make("lamarckian/Pong-v0", **env_kwargs)
    returns = np.zeros(episodes)
    try:
        for episode in range(episodes):
            observation, _ = env.reset(seed=seed + episode)
            done = False
            while not done:
                with torch.inference_mode():
                    action, _ = model.act(torch.as_tensor(observation[None], dtype=torch.float32))
                observation, reward, terminated, truncated, _ = env.step(int(action[0]))
                returns[episode] += float(reward)
                done = terminated or truncated
    finally:
        env.close()
    return returns


def score_against_scripted(model: ActorCritic, episodes: int, seed: int = 0, **env_kwargs: Any) -> float:
    """Mean return of `returns_against_scripted`."""
    return float(returns_against_scripted(model, episodes, seed, **env_kwargs).mean())


class LeagueLearner:
    def __init__(self, config: LeagueRunConfig, slot: int) -> None:
        learner_seat, opponent_seat = config.algorithm.seats
        mdps = [make_pettingzoo_mdp(config.env) for _ in range(config.env.num_envs)]
        roles = MultiAgentConfig(policies=(LEARNER, OPPONENT), policies_to_train=(LEARNER,))
        mapping = alternating_seats_mapping(config.algorithm.seats, LEARNER, OPPONENT) \
            if config.algorithm.alternate_seats else fixed_mapping({learner_seat: LEARNER, opponent_seat: OPPONENT})
        self.trainer = MultiAgentTrainer(mdps, roles, config.ppo, config.model, seed=config.seed * 10_007 + slot,
                                         mapping_fn=mapping, record_every=config.storage.trajectories.every_episodes)
        self.episodes = 0  # the learner's finished episodes: they number its recorded ones
        self.model, self.opponent = self.trainer.models[LEARNER], self.trainer.models[OPPONENT]
        self.reset(initial_weights(config))

    def update(self, opponent: Weights | None) -> dict[str, Any]:
        """One PPO update against `opponent` (None: itself); the games that ended, and the weights after."""
        experience = self.sample(opponent)
        diagnostics = self.trainer.learner.update(LEARNER, experience, self.trainer.sampler.env_frames)
        return self.updated(diagnostics)

    def sample(self, opponent: Weights | None) -> ExperienceBatch:
        """A batch of the learner's seat against `opponent` (None: itself)."""
        self.trainer.load_weights(OPPONENT, model_weights(self.model) if opponent is None else opponent)
        return self.trainer.sample()[LEARNER]

    def updated(self, diagnostics: dict[str, float]) -> dict[str, Any]:
        """After the update: the games that ended while sampling, and the weights now."""
        self.trainer.updated(LEARNER)
        recorded = recorded_answers(self.episodes, self.trainer.last_completed, self.trainer.sampler.env_frames,
                                    LEARNER)
        returns = np.array([r.episode_return for r in self.trainer.last_completed if r.policy_id == LEARNER])
        self.episodes += len(returns)
        illegal = sum(int(getattr(mdp, "illegal_actions", 0)) for mdp in self.trainer.sampler.mdps)
        return {"wins": int((returns > 0).sum()), "draws": int((returns == 0).sum()),
                "losses": int((returns < 0).sum()), "return_mean": float(returns.mean()) if len(returns) else None,
                "illegal_actions": illegal,
                "env_frames": int(self.trainer.sampler.env_frames), "weights": model_weights(self.model),
                "diagnostics": {name: float(value) for name, value in diagnostics.items()}, "recorded": recorded}

    @property
    def optimizer(self) -> Adam:
        return self.trainer.learner.learner(LEARNER).optimizer

    def reset(self, weights: Weights) -> None:
        """Start again from `weights` with a fresh optimizer state (an exploiter's reset)."""
        self.trainer.load_weights(LEARNER, weights)
        self.optimizer.state.clear()

    def checkpoint(self) -> dict[str, Any]:
        optimizer = self.optimizer.state_dict()
        moments = {f"{index}/{key}": torch.as_tensor(value).numpy().copy()
                   for index, slots in optimizer["state"].items() for key, value in slots.items()}
        return {"weights": model_weights(self.model), "moments": moments, "env_frames": self.trainer.sampler.env_frames,
                "rng": self.trainer.learner.learner(LEARNER).rng.bit_generator.state, "episodes": self.episodes}

    def restore(self, state: dict[str, Any]) -> None:
        self.reset(state["weights"])
        optimizer = self.optimizer
        saved = optimizer.state_dict()
        moments: dict[int, dict[str, torch.Tensor]] = {}
        for name, array in state["moments"].items():
            index, key = name.split("/")
            moments.setdefault(int(index), {})[key] = torch.tensor(array)
        saved["state"] = moments
        optimizer.load_state_dict(saved)
        self.trainer.sampler.env_frames = int(state["env_frames"])
        self.trainer.learner.learner(LEARNER).rng.bit_generator.state = state["rng"]
        self.episodes = int(state.get("episodes", 0))  # (absent from checkpoints saved before it was)

    def close(self) -> None:
        self.trainer.close()


class LeagueLearners(HostedMembers):
    """The learners `slots` of the league (in the league's order: main agents, main exploiters,
    league exploiters). With `runtime.batched_updates` they update together: each samples its
    batch against its own opponent, then one batched PPO step over their stacked parameters
    updates them all (`rl.batched_ppo`), each with its own minibatch order and Adam state."""

    def __init__(self, config: LeagueRunConfig, slots: list[int]) -> None:
        torch.set_num_threads(config.runtime.torch_threads)
        self.config = config
        self.members = {slot: LeagueLearner(config, slot) for slot in slots}
        together = config.runtime.batched_updates and len(self.members) > 1
        members = list(self.members.values())
        self.batched = BatchedPPO([m.model for m in members], [m.optimizer for m in members],
                                  [config.ppo] * len(members)) if together else None

    def update(self, slot: int, opponent: Weights | None) -> dict[str, Any]:
        return self.members[slot].update(opponent)

    def update_all(self, opponents: list[Weights | None]) -> list[dict[str, Any]]:
        """One update of every learner of this worker, in slot order, each against its opponent."""
        learners = [self.members[slot] for slot in sorted(self.members)]
        if self.batched is None:
            return [learner.update(opponent) for learner, opponent in zip(learners, opponents)]
        experiences = [learner.sample(opponent) for learner, opponent in zip(learners, opponents)]
        ppo_learners = [learner.trainer.learner.learner(LEARNER) for learner in learners]
        prepared = [ppo_learner.ppo_batch(e, learner.trainer.sampler.env_frames)
                    for ppo_learner, learner, e in zip(ppo_learners, learners, experiences)]
        batches = [batch for batch, _ in prepared]
        rngs = [ppo_learner.rng for ppo_learner in ppo_learners]
        if len({tuple(tuple(field.shape) for field in batch) for batch in batches}) == 1:
            self.batched.load_members()  # resets and restores since the last update
            diagnostics = self.batched.update(batches, rngs)
            self.batched.write_back()
        else:  # batches of different sizes: one by one
            diagnostics = [ppo_update(learner.model, learner.optimizer, batch, self.config.ppo, rng)
                           for learner, batch, rng in zip(learners, batches, rngs)]
        answers = []
        for learner, ppo_learner, experience, (_, learning_rate), learner_diagnostics in zip(
                learners, ppo_learners, experiences, prepared, diagnostics):
            answers.append(learner.updated(ppo_learner.updated(experience, learner_diagnostics, learning_rate)))
        return answers

    def reset(self, slot: int, weights: Weights) -> None:
        self.members[slot].reset(weights)

    def score_against_scripted(self, slot: int, episodes: int, seed: int) -> tuple[float, float]:
        """(mean return, fraction of games won) of learner `slot` against `algorithm.scripted_opponent`."""
        algorithm, model = self.config.algorithm, self.members[slot].model
        if algorithm.scripted_opponent == "random":
            from .league_evaluation import play_against_random  # (it imports the runtime's sampler side)

            record = play_against_random(TorchPolicy(model), self.config.env, algorithm.seats, episodes, seed)
            return record.score, record.win_rate
        returns = returns_against_scripted(model, episodes, seed, opponent_skill=algorithm.scripted_opponent_skill)
        return float(returns.mean()), float((returns > 0).mean())

