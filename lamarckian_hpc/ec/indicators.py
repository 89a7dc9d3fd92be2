"""Quality indicators of an objective set, from pymoo (kept there, not written here)."""

from __future__ import annotations

import numpy as np
from pymoo.indicators.hv import HV
from pymoo.indicators.igd import IGD


def hypervolume(objectives: np.ndarray, reference_point: np.ndarray) -> float:
    return float(HV(ref_point=np.asarray(reference_point, dtype=float))(np.asarray(objectives, dtype=float)))


def inverted_generational_distance(objectives: np.ndarray, pareto_front: np.ndarray) -> float:
    return float(IGD(np.asarray(pareto_front, dtype=float))(np.asarray(objectives, dtype=float)))
