"""The sampling side of a multi-agent run: PettingZoo environments or native MDPs, agents mapped to
policies, one experience buffer per trained policy, in an actor process.

It is `sampling.SamplingSide` with a policy dimension (`sides.make_sampling_side` builds either), so the actor loop drives both the same way:
`sample` ticks until the trained policies together hold the steps asked for, `take_experience`
hands back one batch per trained policy (with the episodes its agents finished), and
`load_broadcast` takes the learner's one weights message, which carries every policy under its
own version (`policy_weights`). Policies act with the torch-free numpy networks, so an actor
process never imports torch; keep torch imports out of this module.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from ...comm import Message
from ...comm.wire import MAX_ARRAYS
from ...config import EnvConfig, RunConfig
from ...config.train import NATIVE_MDP_PREFIX, PETTINGZOO_PREFIX
from ...mdp import MDP, EpisodeResult, EpisodeSelector, ExperienceBatch, ExperienceBuffer, Sampler
from ...multiagent import AECEnvMDP, GlobalStateMDP, ParallelEnvMDP, PolicyMapping, configured_mapping
from ..run_shape import recorded_every
from .network_layout import actor_critic_layout
from .numpy_policy import NumpyActorCriticPolicy

#: Broadcast meta key: {policy id: version} of the weights in the message.
POLICY_VERSIONS = "policy_versions"


def _env_module(env: EnvConfig) -> Any:
    module_name = env.id.removeprefix(PETTINGZOO_PREFIX)
    try:
        return importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"env.id: cannot import {module_name!r}: {error} (mpe2 comes with the multiagent extra: "
                         "pip install -c constraints.txt -e '.[multiagent]')") from None


def make_parallel_env(env: EnvConfig) -> Any:
    """`env.id` pettingzoo:<module> made as `<module>.parallel_env(**env.kwargs)`."""
    module = _env_module(env)
    factory = getattr(module, "parallel_env", None)
    if not callable(factory):
        raise ValueError(f"env.id: {module.__name__} has no parallel_env(); a PettingZoo environment module is needed")
    return factory(**env.kwargs)


def make_native_mdp(env: EnvConfig) -> MDP:
    """`env.id` mdp:<module> made as `<module>.make_mdp(**env.kwargs)`: an MDP of the asynchronous
    interface as it is, its own clock, turns and players that come and go included (a PettingZoo
    parallel environment steps every agent at once, so it cannot say that)."""
    module_name = env.id.removeprefix(NATIVE_MDP_PREFIX)
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"env.id: cannot import {module_name!r}: {error}") from None
    factory = getattr(module, "make_mdp", None)
    if not callable(factory):
        raise ValueError(f"env.id: {module_name} has no make_mdp(); an mdp:<module> environment module is needed")
    mdp = factory(**env.kwargs)
    if not isinstance(mdp, MDP):
        raise ValueError(f"env.id: {module_name}.make_mdp() returned a {type(mdp).__name__}, not an MDP")
    return mdp


def make_multiagent_mdp(env: EnvConfig) -> MDP:
    """One environment of a multi-agent run as an MDP: native, or a PettingZoo one adapted."""
    if env.id.startswith(NATIVE_MDP_PREFIX):
        return make_native_mdp(env)
    return make_pettingzoo_mdp(env)


def make_pettingzoo_mdp(env: EnvConfig) -> MDP:
    """`env.id` pettingzoo:<module> adapted: `<module>.parallel_env()` in a `ParallelEnvMDP` when the
    module has one, otherwise its turn-based `<module>.env()` (an AECEnv, as pettingzoo.classic's
    board games have) in an `AECEnvMDP`."""
    module = _env_module(env)
    if callable(getattr(module, "parallel_env", None)):
        return ParallelEnvMDP(make_parallel_env(env))
    factory = getattr(module, "env", None)
    if not callable(factory):
        raise ValueError(f"env.id: {module.__name__} has neither parallel_env() nor env(); a PettingZoo "
                         "environment module is needed")
    aec = factory(**env.kwargs)
    if not (callable(getattr(aec, "observe", None)) and callable(getattr(aec, "last", None))):
        raise ValueError(f"env.id: {module.__name__}.env() made {type(aec).__name__}, not a PettingZoo AECEnv")
    return AECEnvMDP(aec)


def make_multiagent_mdps(config: RunConfig) -> list[MDP]:
    """`env.num_envs` environments, widened with the global state for a centralised critic."""
    assert config.multiagent is not None
    mdps: list[MDP] = [make_multiagent_mdp(config.env) for _ in range(config.env.num_envs)]
    return [GlobalStateMDP(mdp) for mdp in mdps] if config.multiagent.centralized_critic else mdps


@dataclass(frozen=True)
class MultiAgentSpaces:
    """What both sides build their networks from: every agent's own observation and action space,
    the global state a centralised critic reads (0: none), and the rows that travel (own | state)."""

    observation_space: gym.spaces.Box
    action_space: gym.Space
    global_state_size: int
    agents: tuple[str, ...]

    @property
    def row_space(self) -> gym.spaces.Box:
        size = int(np.prod(self.observation_space.shape)) + self.global_state_size
        return gym.spaces.Box(-np.inf, np.inf, (size,), np.float32)

    @property
    def step_space(self) -> gym.spaces.Box:
        """The observation each recorded step carries, as the sampler saw it: the agent's own in its
        own shape ((27, 5) stays (27, 5)), or the flat row [own | global state] with a centralised
        critic (`GlobalStateMDP` widens observations before any controller sees them)."""
        return self.row_space if self.global_state_size else self.observation_space


def multiagent_spaces(config: RunConfig) -> MultiAgentSpaces:
    """Read from one environment made, reset and closed here; every agent must share the spaces of
    the first (one network per policy, fed one batch per tick), and a fixed mapping must bind every
    agent the environment may have."""
    assert config.multiagent is not None
    mdp = make_multiagent_mdp(config.env)
    try:
        mdp.reset(seed=config.seed)
        possible = getattr(mdp, "env", mdp)  # a PettingZoo env's own list, or the native MDP's
        agents = tuple(str(agent) for agent in getattr(possible, "possible_agents", mdp.agent_ids()))
        first = mdp.agent_ids()[0]
        shape = np.asarray(mdp.observation(first), dtype=np.float32).shape
        action_space = mdp.action_space(first)
        for agent in mdp.agent_ids():
            if np.asarray(mdp.observation(agent)).shape != shape or mdp.action_space(agent) != action_space:
                raise ValueError(f"env.id: agent {agent!r} observes or acts unlike {first!r}; the agents of a "
                                 "multiagent run must share observation and action spaces")
        state_size = GlobalStateMDP(mdp).state_size if config.multiagent.centralized_critic else 0
    finally:
        mdp.close()
    mapping = config.multiagent.mapping
    if isinstance(mapping, dict) and (unbound := sorted(set(agents) - set(mapping))):
        raise ValueError(f"multiagent.mapping: agents {unbound} of {config.env.id} have no policy in the map")
    return MultiAgentSpaces(gym.spaces.Box(-np.inf, np.inf, shape, np.float32), action_space, state_size, agents)


def policy_weights(arrays: Mapping[str, np.ndarray], policy_ids: Any) -> dict[str, dict[str, np.ndarray]]:
    """The broadcast's arrays `<policy>/<parameter>` split into one state dict per policy."""
    split: dict[str, dict[str, np.ndarray]] = {policy_id: {} for policy_id in policy_ids}
    for name, array in arrays.items():
        policy_id, _, parameter = name.partition("/")
        if policy_id not in split or not parameter:
            raise ValueError(f"the weights name {name!r}, not a parameter of the policies {sorted(split)}")
        split[policy_id][parameter] = array
    return split


def flat_weights(weights: Mapping[str, Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """One broadcast's arrays from each policy's state dict; the wire format carries MAX_ARRAYS."""
    arrays = {f"{policy_id}/{name}": array for policy_id, state in weights.items() for name, array in state.items()}
    if len(arrays) > MAX_ARRAYS:
        raise ValueError(f"multiagent.policies: {len(weights)} policies have {len(arrays)} weight arrays, more "
                         f"than one message carries ({MAX_ARRAYS}); use fewer policies or layers")
    return arrays


@dataclass
class MultiAgentSamplingSide:
    sampler: Sampler
    experiences: dict[str, ExperienceBuffer]  # trained policies only: frozen ones record nothing
    policies: dict[str, Any]  # numpy policies (an actor's), or torch ones on CNN models (the serial trainer's)
    observation_space: gym.Space  # of the rows that travel
    max_consecutive_env_errors: int = 100
    model: None = None  # never a torch network: multi-agent actors act with numpy

    @property
    def num_steps(self) -> int:
        return sum(buffer.num_steps for buffer in self.experiences.values())

    def sample(self, num_steps: int) -> None:
        """Tick until the trained policies together hold `num_steps` steps."""
        while self.num_steps < num_steps:
            self.sampler.tick()
            self.sampler.check_environments(self.max_consecutive_env_errors)

    def sample_ready(self, batch_steps: int) -> list[str]:
        """Tick until at least one trained policy holds `batch_steps`; the policies that do
        (policies that are rarely mapped fill their batches, and are updated, less often)."""
        while not (ready := [pid for pid, buffer in self.experiences.items() if buffer.num_steps >= batch_steps]):
            for _ in range(8):
                self.sampler.tick()
            self.sampler.check_environments(self.max_consecutive_env_errors)
        return ready

    def load_policy_weights(self, policy_id: str, weights: Mapping[str, np.ndarray]) -> None:
        self.policies[policy_id].load_weights(weights)

    def take_experience(self) -> list[tuple[str, ExperienceBatch, list[EpisodeResult]]]:
        """(policy id, its batch, its agents' finished episodes) of every trained policy with steps."""
        completed = self.sampler.take_completed()
        taken = []
        for policy_id, buffer in self.experiences.items():
            if buffer.num_steps:
                taken.append((policy_id, buffer.take(), [r for r in completed if r.policy_id == policy_id]))
        return taken

    def load_broadcast(self, message: Message) -> int:
        """Every policy's weights and version from one broadcast; returns the broadcast's version."""
        versions = message.meta[POLICY_VERSIONS]
        for policy_id, weights in policy_weights(message.arrays, self.policies).items():
            self.policies[policy_id].load_weights(weights)
            self.sampler.policy_versions[policy_id] = int(versions[policy_id])
        return message.policy_version

    def set_epsilon(self, epsilon: float) -> None:
        """No epsilon-greedy policies here (the actor loop sets one for DQN)."""

    def close(self) -> None:
        self.sampler.close()


def make_multiagent_side(config: RunConfig, seed: int, spaces: MultiAgentSpaces | None = None) -> MultiAgentSamplingSide:
    """Environments, mapping, buffers and numpy policies of one actor; `seed` also seeds a random mapping."""
    assert config.multiagent is not None
    multiagent = config.multiagent
    spaces = spaces or multiagent_spaces(config)
    layout = actor_critic_layout(spaces.observation_space, spaces.action_space, config.model, spaces.global_state_size)
    policies = {policy_id: NumpyActorCriticPolicy(layout, config.model.activation, seed + 104_729 * index)
                for index, policy_id in enumerate(multiagent.policies)}
    experiences = {policy_id: ExperienceBuffer() for policy_id in multiagent.trained}
    mapping = PolicyMapping(configured_mapping(multiagent.mapping, multiagent.policies, seed), multiagent.policies,
                            multiagent.trained, experiences, EpisodeSelector(recorded_every(config)))
    sampler = Sampler(make_multiagent_mdps(config), mapping, policies, seed)
    return MultiAgentSamplingSide(sampler, experiences, policies, spaces.row_space,
                                  config.runtime.max_consecutive_env_errors)
