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

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...config import RunConfig
from ...mdp.staleness import STALENESS_METRICS
from ...multiagent import build_policy_models
from ...multiagent.policies import MultiPolicyLearner
from ..actor.multiagent_sampling import POLICY_VERSIONS, MultiAgentSpaces, flat_weights
from .episodes import RecentEpisodes


class PolicyLearners(MultiPolicyLearner):
    """The multi-policy learner of a run's config, with the one weights message of every policy."""

    def __init__(self, config: RunConfig, spaces: MultiAgentSpaces) -> None:
        assert config.multiagent is not None
        multiagent = config.multiagent
        models = build_policy_models(multiagent.policies, multiagent.trained, spaces.observation_space,
                                     spaces.action_space, config.model, multiagent.shared_layers, config.seed,
                                     spaces.global_state_size)
        super().__init__(models, multiagent.trained, config)

    def weights(self) -> dict[str, np.ndarray]:
        """Every policy's parameters as `<policy>/<parameter>` CPU arrays."""
        return flat_weights({policy_id: {name: tensor.detach().cpu().numpy()
                                         for name, tensor in model.state_dict().items()}
                             for policy_id, model in self.models.items()})

    def broadcast_meta(self, env_frames: int) -> dict[str, Any]:
        return {POLICY_VERSIONS: self.versions}


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
