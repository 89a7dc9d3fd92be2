"""EvoRL: evolutionary algorithms over populations of RL learners (PBT+PPO, EMOGI, the PPO league,
automated game testing), as programs of the population workflow.

PBT's names are imported when first used: the game-testing program imports this package and must
not load torch."""

from importlib import import_module
from typing import Any

_PBT = ("METRIC_NAMES", "IntervalReport", "PBTResult", "population_shape", "run_pbt")


def __getattr__(name: str) -> Any:
    if name in _PBT:
        return getattr(import_module(".pbt_ppo", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(_PBT)
