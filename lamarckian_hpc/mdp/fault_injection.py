"""An environment that fails on purpose, to show that a failing game costs an episode, not a run.

`lamarckian/Faulty-v0` wraps any Gymnasium id and raises `InjectedEnvError` from `step` at a given
rate, seeded so that a test or benchmark sees the same failures every time:
``env.id=lamarckian/Faulty-v0 env.kwargs='{env_id: CartPole-v1, error_rate: 0.01}'``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

FAULTY_ENV_ID = "lamarckian/Faulty-v0"


class InjectedEnvError(RuntimeError):
    """Raised by FaultyEnv in place of a real game-server failure."""


class FaultyEnv(gym.Wrapper):
    def __init__(self, env_id: str = "CartPole-v1", error_rate: float = 0.01, seed: int = 0,
                 **kwargs: Any) -> None:
        if not 0.0 <= error_rate <= 1.0:
            raise ValueError(f"error_rate must be within [0, 1], got {error_rate}")
        super().__init__(gym.make(env_id, **kwargs))
        self.error_rate = error_rate
        self.failures = np.random.default_rng(seed)
        self.raised = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        if seed is not None:
            self.failures = np.random.default_rng(seed + 104_729)
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> Any:
        if self.failures.random() < self.error_rate:
            self.raised += 1
            raise InjectedEnvError(f"injected environment failure #{self.raised}")
        return self.env.step(action)


def make_faulty_env(**kwargs: Any) -> FaultyEnv:
    """The registered entry point. A function, not the class: gymnasium 1.2's `make` validates an
    entry point's class-level `metadata`, which on a Wrapper is the property forwarding it."""
    return FaultyEnv(**kwargs)


def register() -> None:
    if FAULTY_ENV_ID not in gym.registry:
        gym.register(FAULTY_ENV_ID, entry_point=make_faulty_env, disable_env_checker=True)
