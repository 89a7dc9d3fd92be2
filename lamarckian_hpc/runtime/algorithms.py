"""The RL algorithms a training run can name, one entry each: the one table the runtime looks them up in.

An entry says everything that differs between algorithms to the processes of a run: its config
model, its learner, the network its actors sample with (and broadcast), the policy an actor
samples with, with and without torch, the deterministic policy `export` writes, whether actors compute gradients instead of sending
experience, whether it runs serially, and the metrics its learner reports. The trainers, the
actors and the run file ask the entry; nothing else tells algorithms apart. Adding an algorithm
is its maths and learner in `rl/`, its config model in `config/train.py`, and one entry here.

Torch-side parts are named by import path ("module:attribute", as Gymnasium's registry names
entry points), so that an actor that samples with numpy never imports torch to look one up.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import gymnasium as gym
from pydantic import BaseModel

from ..config import A3CConfig, DQNConfig, ImpalaConfig, PPOConfig, RunConfig, SACConfig
from ..config.train import ALGORITHMS, DATA_PARALLEL_ALGORITHMS
from ..mdp.staleness import STALENESS_METRICS

if TYPE_CHECKING:
    import torch

    from ..rl.data_parallel import GradientReducer
    from ..rl.learner import LearnerBase

#: Metrics every training run reports, whatever its algorithm (with the learner's own, below).
TRAINING_METRICS: tuple[str, ...] = (
    "episode_return_mean", "episode_length_mean", "episodes", "env_frames_per_second", "trained_frames_per_second",
    "learning_rate", "staleness_mean", "staleness_max", *STALENESS_METRICS, "env_errors", "nonfinite_steps",
)

_ACTOR_CRITIC = "lamarckian_hpc.models.actor_critic:ActorCritic"
_ACTOR_CRITIC_NUMPY = "lamarckian_hpc.runtime.actor.numpy_policy:actor_critic_policy"
_ACTOR_CRITIC_TORCH = "lamarckian_hpc.runtime.actor.inference:actor_critic_policy"
_ACTOR_CRITIC_GREEDY = "lamarckian_hpc.models.greedy:ActorCriticGreedy"
_ACTOR_CRITIC_LOSSES = ("loss_policy", "loss_value", "entropy")


@dataclass(frozen=True)
class RLAlgorithm:
    name: str
    config: type[BaseModel]
    #: (RunConfig, observation space, action space, model) -> the learner (`rl.learner.Learner`).
    learner: str
    #: (observation space, action space, ModelConfig) -> the torch network actors sample with and
    #: the learner broadcasts.
    model: str
    #: (RunConfig, torch network, action space, seed) -> a sampler policy on that network.
    torch_policy: str
    #: Metrics the learner reports beyond TRAINING_METRICS.
    metrics: tuple[str, ...]
    #: (torch network) -> the module `export` writes: observations -> (greedy actions, outputs)
    #: (`models/greedy.py`).
    greedy: str
    #: (RunConfig, observation space, action space, seed) -> a torch-free sampler policy; None:
    #: actors sample with torch.
    numpy_policy: str | None = None
    #: (torch network, ExperienceBatch, algorithm config) -> (gradients, diagnostics): actors send
    #: gradients computed on their own rollouts instead of experience (A3C).
    actor_gradients: str | None = None
    #: Whether the serial trainer can run it (one that learns from actors' gradients cannot).
    serial: bool = True
    #: Whether its learner can run as several ranks (runtime.learners > 1; `rl.data_parallel`).
    data_parallel: bool = False

    def build(self, part: str, *args: Any) -> Any:
        """Import the named part and call it with `args`."""
        return load(getattr(self, part))(*args)

    @property
    def metric_names(self) -> tuple[str, ...]:
        return (*TRAINING_METRICS, *(name for name in self.metrics if name not in TRAINING_METRICS))


def load(entry_point: str) -> Any:
    """The attribute an entry point names ("package.module:attribute")."""
    module, _, attribute = entry_point.partition(":")
    return getattr(importlib.import_module(module), attribute)


RL_ALGORITHMS: dict[str, RLAlgorithm] = {entry.name: entry for entry in (
    RLAlgorithm("ppo", PPOConfig, learner="lamarckian_hpc.rl.learner:PPOLearner", model=_ACTOR_CRITIC,
                numpy_policy=_ACTOR_CRITIC_NUMPY, torch_policy=_ACTOR_CRITIC_TORCH, greedy=_ACTOR_CRITIC_GREEDY,
                metrics=(*_ACTOR_CRITIC_LOSSES, "approx_kl", "clip_fraction"), data_parallel=True),
    RLAlgorithm("impala", ImpalaConfig, learner="lamarckian_hpc.rl.learner:ImpalaLearner", model=_ACTOR_CRITIC,
                numpy_policy=_ACTOR_CRITIC_NUMPY, torch_policy=_ACTOR_CRITIC_TORCH, greedy=_ACTOR_CRITIC_GREEDY,
                metrics=_ACTOR_CRITIC_LOSSES, data_parallel=True),
    RLAlgorithm("a3c", A3CConfig, learner="lamarckian_hpc.rl.learner:A3CLearner", model=_ACTOR_CRITIC,
                torch_policy=_ACTOR_CRITIC_TORCH, greedy=_ACTOR_CRITIC_GREEDY, metrics=_ACTOR_CRITIC_LOSSES,
                actor_gradients="lamarckian_hpc.rl.a3c:a3c_gradients", serial=False),
    RLAlgorithm("dqn", DQNConfig, learner="lamarckian_hpc.rl.learner:DQNLearner",
                model="lamarckian_hpc.models.q_network:QNetwork",
                numpy_policy="lamarckian_hpc.runtime.actor.numpy_policy:epsilon_greedy_policy",
                torch_policy="lamarckian_hpc.runtime.actor.inference:epsilon_greedy_policy",
                greedy="lamarckian_hpc.models.greedy:QGreedy",
                metrics=("loss_value", "epsilon", "replay_size")),
    RLAlgorithm("sac", SACConfig, learner="lamarckian_hpc.rl.sac_learner:SACLearner",
                model="lamarckian_hpc.rl.sac:SquashedGaussianActor", torch_policy="lamarckian_hpc.rl.sac:sac_policy",
                greedy="lamarckian_hpc.models.greedy:SquashedGaussianGreedy",
                metrics=("loss_value", "loss_policy", "entropy", "alpha", "epsilon", "replay_size")),
)}
assert {name: entry.config for name, entry in RL_ALGORITHMS.items()} == ALGORITHMS, \
    "every algorithm config of config/train.py needs an entry here, under its name"
assert tuple(name for name, entry in RL_ALGORITHMS.items() if entry.data_parallel) == DATA_PARALLEL_ALGORITHMS, \
    "config/train.py's DATA_PARALLEL_ALGORITHMS (what runtime.learners > 1 accepts) must name the entries that are"


def rl_algorithm(config: RunConfig) -> RLAlgorithm:
    """The entry of the algorithm `config` names."""
    return RL_ALGORITHMS[config.algorithm.name]


def build_model(config: RunConfig, observation_space: gym.Space, action_space: gym.Space) -> torch.nn.Module:
    """The network the run's algorithm samples with and its learner trains."""
    return rl_algorithm(config).build("model", observation_space, action_space, config.model)


def make_learner(config: RunConfig, observation_space: gym.Space, action_space: gym.Space, *,
                 reducer: GradientReducer | None = None) -> LearnerBase:
    """The learner of the run's algorithm, on a network of its own, seeded by the run's seed (so the
    learner ranks of a policy, given their group as `reducer`, start from the same weights and draw
    the same minibatches)."""
    import torch

    torch.manual_seed(config.seed)  # the network's initial weights, then every draw of the learner's
    model = build_model(config, observation_space, action_space)
    return load(rl_algorithm(config).learner)(config, observation_space, action_space, model, reducer=reducer)
