"""Typed configuration: the one place a run's settings are declared, bounded and explained.

A run is described by a YAML file plus `key.path=value` overrides from the command line. Everything
is validated when it is loaded, so that a typo or an out-of-range value stops the run before any
process starts, with one line that names the field and what it accepts (``ConfigError``). Nothing
here imports torch, gymnasium or the runtime: loading a config must be cheap and side-effect free.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .base import ConfigError, RootSection, Section, StorageConfig, TrajectoriesConfig
from .launch import LaunchConfig, slurm_time_minutes
from .loading import apply_overrides, build_config, load_config, parse_override
from .multiagent import LeagueConfig, MultiAgentConfig
from .train import (
    ALGORITHMS,
    A3CConfig,
    AlgorithmConfig,
    DQNConfig,
    EnvConfig,
    ImpalaConfig,
    ModelConfig,
    PPOConfig,
    RunConfig,
    RuntimeConfig,
    SACConfig,
    StopConfig,
)

if TYPE_CHECKING:
    from .emogi import EMOGIAlgorithmConfig, EMOGIConfig, EMOGIRuntimeConfig
    from .evolve import EVOLVE_ALGORITHMS, EvolveConfig, EvolveRuntimeConfig, GAConfig, NSGA2Config, ProblemConfig
    from .pbt import HyperparameterRange, PBTAlgorithmConfig, PBTConfig, PBTRuntimeConfig, PBTStopConfig

#: The population configs, imported when first named: an actor process or a training run, which
#: never needs them, would otherwise spend about 0.1 s building their pydantic models.
_POPULATION_MODULES = {
    **dict.fromkeys(("EVOLVE_ALGORITHMS", "EvolveConfig", "EvolveRuntimeConfig", "GAConfig", "NSGA2Config",
                     "ProblemConfig"), "evolve"),
    **dict.fromkeys(("EMOGIAlgorithmConfig", "EMOGIConfig", "EMOGIRuntimeConfig"), "emogi"),
    **dict.fromkeys(("HyperparameterRange", "PBTAlgorithmConfig", "PBTConfig", "PBTRuntimeConfig", "PBTStopConfig"),
                    "pbt"),
}


def __getattr__(name: str) -> Any:
    if name not in _POPULATION_MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_POPULATION_MODULES[name]}", __name__), name)
    globals()[name] = value
    return value

__all__ = ["ALGORITHMS", "apply_overrides", "A3CConfig", "AlgorithmConfig", "ConfigError", "DQNConfig", "EnvConfig", "EvolveConfig",
           "EvolveRuntimeConfig", "EVOLVE_ALGORITHMS", "GAConfig", "ImpalaConfig", "ModelConfig", "NSGA2Config", "PPOConfig", "ProblemConfig",
           "RootSection", "RunConfig", "RuntimeConfig", "SACConfig", "Section", "StopConfig", "StorageConfig", "TrajectoriesConfig", "build_config",
           "load_config", "parse_override", "HyperparameterRange", "PBTAlgorithmConfig", "PBTConfig",
           "PBTRuntimeConfig", "PBTStopConfig", "EMOGIAlgorithmConfig", "EMOGIConfig", "EMOGIRuntimeConfig",
           "LeagueConfig", "MultiAgentConfig", "LaunchConfig", "slurm_time_minutes"]
