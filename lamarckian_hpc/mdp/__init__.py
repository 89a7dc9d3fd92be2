"""The asynchronous MDP interface: environments, controllers and the batched sampler."""

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
    "Policy",
    "PolicyOutput",
    "RecordedSteps",
    "Sampler",
    "EnvironmentFailingError",
    "ScriptedController",
    "StepOutcome",
    "TrainingController",
    "make_gym_env",
]
