"""EvoRL: evolutionary algorithms over populations of RL learners (PBT+PPO)."""

from .pbt_ppo import METRIC_NAMES, IntervalReport, PBTResult, population_shape, run_pbt

__all__ = ["METRIC_NAMES", "IntervalReport", "PBTResult", "population_shape", "run_pbt"]
