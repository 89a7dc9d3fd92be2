"""Multi-agent training after RLlib's model: agents bound to policies when they appear, several
policies per run (some frozen), layers shared across policies, an optional centralised critic,
PettingZoo adapters (parallel, and turn-based AEC). The serial trainer that updates every trained policy from one batched Sampler
is `lamarckian_hpc.runtime.runners.multiagent_trainer.MultiAgentTrainer`, with the other runtimes.

The names built on torch (the policies) are imported when first used: actor
processes import the mapping, the adapter and the global state from here and must not load torch.
"""

from importlib import import_module
from typing import Any

from .aec_adapter import AECEnvMDP
from .global_state import GlobalStateMDP
from .mapping import (
    PolicyMapping,
    PolicyMappingFn,
    alternating_seats_mapping,
    configured_mapping,
    fixed_mapping,
    random_mapping,
    round_robin_mapping,
)
from .pettingzoo_adapter import ParallelEnvMDP, one_hot

_ON_TORCH = {"MultiPolicyLearner": "policies", "build_policy_models": "policies", "policy_layers": "policies"}


def __getattr__(name: str) -> Any:
    if name in _ON_TORCH:
        return getattr(import_module(f".{_ON_TORCH[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["AECEnvMDP", "GlobalStateMDP", "MultiPolicyLearner", "ParallelEnvMDP",
           "PolicyMapping", "PolicyMappingFn", "alternating_seats_mapping", "build_policy_models", "configured_mapping",
           "fixed_mapping", "one_hot", "policy_layers", "random_mapping", "round_robin_mapping"]
