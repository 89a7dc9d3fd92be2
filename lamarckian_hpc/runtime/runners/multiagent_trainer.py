"""The serial multi-agent trainer: one Sampler, several policies, one PPO update per trained policy
(by the multi-policy learner the distributed runtime updates with, `multiagent.policies`).

Every MDP of the process is stepped by one Sampler, so each tick makes one batched inference per
policy over all agents of all MDPs. Agents are bound to policies by a `PolicyMapping` when they
appear. Each trained policy gathers `ppo.batch_size` steps in its own buffer and is updated as
soon as it has them; policies that are rarely mapped simply update less often. Frozen policies act
and are never updated (their parameters do not even require gradients). With
`multiagent.centralized_critic` every MDP is wrapped in a `GlobalStateMDP`, so that recorded
observations carry the global state the critics read, and GAE uses those centralised values.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np

from ...config import ModelConfig, MultiAgentConfig, PPOConfig, RunConfig, RuntimeConfig
from ...mdp import MDP, EpisodeResult, EpisodeSelector, ExperienceBatch, ExperienceBuffer, Sampler
from ...multiagent.global_state import GlobalStateMDP
from ...multiagent.mapping import PolicyMapping, PolicyMappingFn, configured_mapping
from ...multiagent.policies import MultiPolicyLearner, build_policy_models
from ...rl.learner import load_weights
from ..actor.inference import TorchPolicy
from ..actor.multiagent_sampling import MultiAgentSamplingSide
from ..actor.network_layout import actor_critic_layout
from ..actor.numpy_policy import NumpyActorCriticPolicy
from .training_loop import TrainingLoop


@dataclass
class MultiAgentResult:
    env_frames: int
    wall_time_seconds: float
    updates: dict[str, int]
    #: Mean return of the last `window` finished episodes of each policy's agents (trained or not).
    recent_returns: dict[str, float]
    agents_per_policy: dict[str, int] = field(default_factory=dict)


def default_spaces(mdp: MDP) -> tuple[gym.Space, gym.Space]:
    """Spaces of the first present agent, the observation space taken from its actual observation
    (so that adapters which transform observations build matching models)."""
    agent = mdp.agent_ids()[0]
    shape = np.asarray(mdp.observation(agent), dtype=np.float32).shape
    return gym.spaces.Box(-np.inf, np.inf, shape, np.float32), mdp.action_space(agent)


class MultiAgentTrainer:
    def __init__(self, mdps: Sequence[MDP], config: MultiAgentConfig, ppo: PPOConfig, model: ModelConfig,
                 seed: int = 0, mapping_fn: PolicyMappingFn | None = None,
                 spaces: tuple[gym.Space, gym.Space] | None = None, return_window: int = 20,
                 record_every: int = 0) -> None:
        """`record_every`: keep one trained agent's episode in every this many whole (its steps in
        `EpisodeResult.recorded`), for a run file's `/trajectories`; 0 keeps none."""
        self.config, self.ppo = config, ppo
        trained = config.trained
        if mapping_fn is None:
            mapping_fn = configured_mapping(config.mapping, config.policies, seed)
        if spaces is None:
            first = mdps[0]
            first.reset(seed=seed)
            spaces = default_spaces(first)
        global_state_size = 0
        if config.centralized_critic:
            mdps = [GlobalStateMDP(mdp) for mdp in mdps]
            mdps[0].reset(seed=seed)
            global_state_size = mdps[0].state_size
        self.models = build_policy_models(config.policies, trained, *spaces, model, config.shared_layers, seed,
                                          global_state_size)
        # The learners a training run of these sections would have (serial, on the CPU).
        run_config = RunConfig(seed=seed, model=model, algorithm=ppo,
                               runtime=RuntimeConfig(mode="serial", device="cpu"))
        self.learner = MultiPolicyLearner(self.models, trained, run_config)
        self.experiences = {pid: ExperienceBuffer() for pid in trained}
        self.mapping = PolicyMapping(mapping_fn, config.policies, trained, self.experiences,
                                     EpisodeSelector(record_every))
        # An MLP policy samples with its own torch-free copy (as actors do), which takes the torch
        # model's weights after every update and every `load_weights`; a CNN acts with the model.
        policies: dict[str, NumpyActorCriticPolicy | TorchPolicy] = {
            pid: TorchPolicy(m) for pid, m in self.models.items()}
        if model.kind == "mlp":
            layout = actor_critic_layout(*spaces, model, global_state_size)
            policies = {pid: NumpyActorCriticPolicy(layout, model.activation, seed * 7919 + index)
                        for index, pid in enumerate(self.models)}
        self.sampler = Sampler(mdps, self.mapping, dict(policies), seed)
        sampling = MultiAgentSamplingSide(self.sampler, self.experiences, policies, spaces[0])
        self.loop = TrainingLoop(self.learner.learners, sampling, ppo.batch_size,
                                 shared_layers=bool(config.shared_layers))
        for policy_id in self.learner.frozen:
            self._sync(policy_id)
        self.return_window = return_window
        self.returns: dict[str, list[float]] = defaultdict(list)
        self.updates = {pid: 0 for pid in trained}
        #: Episodes that ended during the last `step` (every policy's, trained or frozen).
        self.last_completed: list[EpisodeResult] = []

    def sample(self) -> dict[str, ExperienceBatch]:
        """Tick until at least one trained policy has a full batch; the batches of those that have
        one (a caller that updates several trainers' policies at once calls this, then `updated`)."""
        sampled = self.loop.sample()
        self.last_completed = sampled.completed
        for result in self.last_completed:
            window = self.returns[result.policy_id]
            window.append(result.episode_return)
            del window[:-self.return_window]
        return sampled.batches

    def updated(self, policy_id: str) -> None:
        """After `policy_id`'s update: its new version samples from now on (and so do the policies
        that share layers with it)."""
        self.updates[policy_id] += 1
        self.loop.updated(policy_id)

    def load_weights(self, policy_id: str, weights: Mapping[str, np.ndarray]) -> None:
        """Give `policy_id` these weights (a frozen opponent's, a restored policy's): its torch
        model and the copy it samples with."""
        load_weights(self.models[policy_id], weights)
        self._sync(policy_id)

    def _sync(self, policy_id: str) -> None:
        """The sampling copy of `policy_id` takes its model's weights (a frozen one's too)."""
        state = self.models[policy_id].state_dict()
        self.loop.sampling.load_policy_weights(policy_id, {name: tensor.detach().cpu().numpy()
                                                          for name, tensor in state.items()})

    def step(self) -> dict[str, dict[str, float]]:
        """Sample until a trained policy has a full batch; update every policy that has one."""
        diagnostics = self.loop.update(self.sample())
        for policy_id in diagnostics:
            self.updates[policy_id] += 1
        return diagnostics

    def train(self, total_env_steps: int) -> MultiAgentResult:
        started = time.monotonic()
        while self.sampler.env_frames < total_env_steps:
            self.step()
        return MultiAgentResult(
            env_frames=self.sampler.env_frames, wall_time_seconds=time.monotonic() - started,
            updates=dict(self.updates),
            recent_returns={pid: float(np.mean(values)) for pid, values in self.returns.items() if values},
            agents_per_policy=dict(self.mapping.counts))

    def close(self) -> None:
        self.loop.close()
