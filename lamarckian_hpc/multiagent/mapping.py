"""Policy mapping after RLlib: which policy drives an agent is decided once, when it first appears.

The sampler asks its controller factory for a controller whenever an agent id appears in an MDP.
`PolicyMapping` is that factory: it calls the mapping function once, binds the agent to the
returned policy id and builds the controller with that id inside, so every decision of the
agent's lifetime goes to the same policy however the mapping function would answer later (a
random mapping included). Agents of trained policies get a training controller that records
into their policy's buffer; agents of frozen policies get a controller that only acts.
"""

from __future__ import annotations

import importlib
import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from ..mdp import AgentId, Controller, EpisodeSelector, ExperienceBuffer, FrozenPolicyController, TrainingController

#: (agent id, index of its MDP in the sampler) -> policy id
PolicyMappingFn = Callable[[AgentId, int], str]


def random_mapping(policy_ids: Sequence[str], seed: int = 0) -> PolicyMappingFn:
    """Each new agent gets a policy drawn uniformly (seeded, so runs repeat)."""
    rng = np.random.default_rng(seed)
    ids = list(policy_ids)
    return lambda agent_id, env_index: ids[int(rng.integers(len(ids)))]


def round_robin_mapping(policy_ids: Sequence[str]) -> PolicyMappingFn:
    """New agents take the policies in turn."""
    ids, counter = list(policy_ids), itertools.count()
    return lambda agent_id, env_index: ids[next(counter) % len(ids)]


def fixed_mapping(agent_policies: Mapping[AgentId, str]) -> PolicyMappingFn:
    """A table from agent id to policy id (two-player games: {"left": "main", "right": "opponent"})."""
    table = dict(agent_policies)

    def mapping(agent_id: AgentId, env_index: int) -> str:
        if agent_id not in table:
            raise KeyError(f"agent {agent_id!r} has no policy in the mapping table; known agents: {sorted(map(str, table))}")
        return table[agent_id]

    return mapping


def alternating_seats_mapping(seats: Sequence[AgentId], first: str, second: str) -> PolicyMappingFn:
    """Two-player games where the seat matters (who moves first in a board game): in each new
    episode of an environment `first` and `second` swap seats, starting with `first` in `seats[0]`
    in even-numbered environments and in `seats[1]` in odd ones, so a learner plays both sides
    equally. A new episode is recognised by a seat mapped a second time; each episode must map
    both seats once, in any order (an AEC game maps its second player at its first turn)."""
    if len(seats) != 2 or seats[0] == seats[1]:
        raise ValueError(f"alternating seats need two different agents, got {list(seats)}")
    swapped: dict[int, bool] = {}
    seated: dict[int, set[AgentId]] = {}

    def mapping(agent_id: AgentId, env_index: int) -> str:
        if agent_id not in seats:
            raise KeyError(f"agent {agent_id!r} has no seat; seats: {list(seats)}")
        episode = seated.setdefault(env_index, set())
        if agent_id in episode or env_index not in swapped:  # a new episode of this environment
            swapped[env_index] = not swapped.get(env_index, env_index % 2 == 0)
            episode.clear()
        episode.add(agent_id)
        first_seat = seats[1] if swapped[env_index] else seats[0]
        return first if agent_id == first_seat else second

    return mapping


def configured_mapping(mapping: str | Mapping[AgentId, str], policy_ids: Sequence[str], seed: int = 0) -> PolicyMappingFn:
    """The function `multiagent.mapping` names: a built-in one, a table, or `module:function`
    (imported here, by the process that maps agents; ValueError naming it when it is not there)."""
    if not isinstance(mapping, str):
        return fixed_mapping(mapping)
    if mapping == "random":
        return random_mapping(policy_ids, seed)
    if mapping == "round_robin":
        return round_robin_mapping(policy_ids)
    module_name, _, name = mapping.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"multiagent.mapping: cannot import {module_name!r} of {mapping!r}: {error}") from None
    function = getattr(module, name, None)
    if not callable(function):
        raise ValueError(f"multiagent.mapping: {module_name} has no function {name!r}")
    return function  # type: ignore[no-any-return]


class PolicyMapping:
    """The sampler's controller factory for a multi-agent run."""

    def __init__(self, mapping_fn: PolicyMappingFn, policy_ids: Iterable[str], policies_to_train: Iterable[str],
                 experiences: Mapping[str, ExperienceBuffer], selector: EpisodeSelector | None = None) -> None:
        """`selector` picks the trained agents' episodes kept whole for the run file (none without one)."""
        self.mapping_fn = mapping_fn
        self.selector = selector
        self.policy_ids = frozenset(policy_ids)
        self.trained = frozenset(policies_to_train)
        missing = self.trained - set(experiences)
        if missing:
            raise ValueError(f"trained policies {sorted(missing)} have no experience buffer")
        self.experiences = experiences
        #: The binding of the latest lifetime of each (env index, agent id).
        self.bindings: dict[tuple[int, AgentId], str] = {}
        #: Agents bound to each policy so far (lifetimes, not ticks).
        self.counts: Counter[str] = Counter()

    def __call__(self, env_index: int, agent_id: AgentId) -> Controller:
        policy_id = self.mapping_fn(agent_id, env_index)
        if policy_id not in self.policy_ids:
            raise KeyError(f"the mapping function returned {policy_id!r} for agent {agent_id!r}; "
                           f"known policies: {sorted(self.policy_ids)}")
        self.bindings[(env_index, agent_id)] = policy_id
        self.counts[policy_id] += 1
        if policy_id in self.trained:
            return TrainingController(policy_id, self.experiences[policy_id], self.selector)
        return FrozenPolicyController(policy_id)
