"""The asynchronous MDP interface: environments, controllers and the batched sampler."""

from .action_masks import MaskedDiscrete, RandomLegalPolicy, legal_actions, mask_size
from .agent import AgentHandle, Decision
from .base import MDP, AgentId, StepOutcome
from .controllers import (
    Controller,
    EpisodeResult,
    FrozenPolicyController,
    ScriptedController,
    TrainingController,
)
from .experience import ExperienceBatch, ExperienceBuffer
from .gym_adapter import AGENT_ID, GymMDP, make_gym_env
from .recording import EpisodeSelector, RecordedSteps
from .sampler import EnvironmentFailingError, Policy, PolicyOutput, Sampler

__all__ = [
    "AGENT_ID",
    "MDP",
    "AgentHandle",
    "AgentId",
    "Controller",
    "Decision",
    "EpisodeResult",
    "EpisodeSelector",
    "ExperienceBatch",
    "ExperienceBuffer",
    "FrozenPolicyController",
    "GymMDP",
    "MaskedDiscrete",
    "Policy",
    "PolicyOutput",
    "RandomLegalPolicy",
    "RecordedSteps",
    "Sampler",
    "EnvironmentFailingError",
    "ScriptedController",
    "StepOutcome",
    "TrainingController",
    "legal_actions",
    "make_gym_env",
    "mask_size",
]
