"""The learner side of a multi-agent run: one learner per trained policy, the frozen ones' networks,
and the one weights message that carries every policy under its own version.

The distributed trainer drives this where a single-agent run has one learner: it updates the
policy whose batch is full (`learners[policy_id].update`, the same PPO update a single-agent run
makes) and publishes `weights()` with `broadcast_meta()`. Each trained policy counts its own
version; the broadcast's version is their sum, so it grows by one with every update of any policy,
which is what the publisher, the relays and the subscribers order messages by. Frozen policies
have no learner: their weights are published as they were built and never change.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch

from ..config import RunConfig
from ..multiagent import build_policy_models
from .episodes import RecentEpisodes
from .learner import STALENESS_METRICS, PPOLearner
from .multiagent_sampling import POLICY_VERSIONS, MultiAgentSpaces, flat_weights


class PolicyLearners:
    def __init__(self, config: RunConfig, spaces: MultiAgentSpaces) -> None:
        assert config.multiagent is not None
        multiagent = config.multiagent
        self.models = build_policy_models(multiagent.policies, multiagent.trained, spaces.observation_space,
                                          spaces.action_space, config.model, multiagent.shared_layers, config.seed,
                                          spaces.global_state_size)
        self.learners: dict[str, PPOLearner] = {}
        for index, policy_id in enumerate(multiagent.trained):
            learner = PPOLearner(config, spaces.observation_space, spaces.action_space, self.models[policy_id])
            learner.rng = np.random.default_rng([config.seed, index])  # each its own minibatch order
            self.learners[policy_id] = learner
        self.frozen = tuple(policy_id for policy_id in multiagent.policies if policy_id not in self.learners)
        self.device = next(iter(self.learners.values())).device if self.learners else torch.device("cpu")
        for policy_id in self.frozen:
            self.models[policy_id].to(self.device)

    @property
    def version(self) -> int:
        """The broadcast's version: updates of all policies so far."""
        return sum(learner.version for learner in self.learners.values())

    @property
    def versions(self) -> dict[str, int]:
        """Each policy's own version (a frozen one stays 0)."""
        return {policy_id: self.learners[policy_id].version if policy_id in self.learners else 0
                for policy_id in self.models}

    def weights(self) -> dict[str, np.ndarray]:
        """Every policy's parameters as `<policy>/<parameter>` CPU arrays."""
        return flat_weights({policy_id: {name: tensor.detach().cpu().numpy()
                                         for name, tensor in model.state_dict().items()}
                             for policy_id, model in self.models.items()})

    def broadcast_meta(self, env_frames: int) -> dict[str, Any]:
        return {POLICY_VERSIONS: self.versions}

    def state_dict(self) -> dict[str, Any]:
        """Each trained policy's learner state (parameters, optimizer, version, generators)."""
        return {"version": self.version, "policies": {pid: learner.state_dict() for pid, learner in self.learners.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        missing = sorted(set(self.learners) - set(state["policies"]))
        if missing:
            raise ValueError(f"the checkpoint has no state for the trained policies {missing}")
        for policy_id, learner in self.learners.items():
            learner.load_state_dict(state["policies"][policy_id])


#: What a multi-agent run records per policy, as `<metric>.<policy id>`: its learner's diagnostics
#: (trained policies), its agents' recent episodes (trained policies) and its version (every policy).
POLICY_METRICS: tuple[str, ...] = (
    "episode_return_mean", "episode_length_mean", "episodes", "loss_policy", "loss_value", "entropy", "approx_kl",
    "clip_fraction", "learning_rate", "staleness_mean", "staleness_max", *STALENESS_METRICS, "nonfinite_steps",
)


def multiagent_metric_names(config: RunConfig) -> tuple[str, ...]:
    """The per-policy metrics the run file declares up front (SWMR cannot add them later)."""
    assert config.multiagent is not None
    names = [f"{name}.{policy_id}" for policy_id in config.multiagent.trained for name in POLICY_METRICS]
    return (*names, *(f"policy_version.{policy_id}" for policy_id in config.multiagent.policies))


def policy_metrics(updates: Mapping[str, tuple[dict[str, float], int]], versions: Mapping[str, int],
                   episodes: Mapping[str, RecentEpisodes]) -> dict[str, float]:
    """One row of a multi-agent run: each updated policy's diagnostics, each trained policy's recent
    episodes, every policy's version, and the staleness of all steps trained on, over all policies."""
    metrics: dict[str, float] = {}
    for policy_id, (diagnostics, _) in updates.items():
        metrics.update({f"{name}.{policy_id}": value for name, value in diagnostics.items() if name in POLICY_METRICS})
    for policy_id, window in episodes.items():
        metrics.update({f"{name}.{policy_id}": value for name, value in window.metrics().items()})
    metrics.update({f"policy_version.{policy_id}": float(version) for policy_id, version in versions.items()})
    steps = {policy_id: count for policy_id, (_, count) in updates.items()}
    if sum(steps.values()):
        metrics["staleness_mean"] = sum(updates[pid][0]["staleness_mean"] * count for pid, count in steps.items()) \
            / sum(steps.values())
        metrics["staleness_max"] = max(updates[pid][0]["staleness_max"] for pid in steps)
    return metrics
