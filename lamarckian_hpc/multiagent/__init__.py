"""Multi-agent training after RLlib's model: agents bound to policies when they appear, several
policies per run (some frozen), layers shared across policies, an optional centralised critic, a
PettingZoo adapter, and a serial trainer that updates every trained policy from one batched Sampler."""

from .global_state import GlobalStateMDP
from .mapping import PolicyMapping, PolicyMappingFn, fixed_mapping, random_mapping, round_robin_mapping
from .pettingzoo_adapter import ParallelEnvMDP, one_hot
from .policies import MultiPolicyLearner, build_policy_models, policy_layers
from .trainer import MultiAgentResult, MultiAgentTrainer, default_spaces

__all__ = ["GlobalStateMDP", "MultiAgentResult", "MultiAgentTrainer", "MultiPolicyLearner", "ParallelEnvMDP",
           "PolicyMapping", "PolicyMappingFn", "build_policy_models", "default_spaces", "fixed_mapping", "one_hot",
           "policy_layers", "random_mapping", "round_robin_mapping"]
