"""The processes of a run and the loops that feed the algorithms."""

from .inference import TorchPolicy
from .observers import TrainObserver, TrainResult, UpdateReport
from .trainer import METRIC_NAMES, POLICY_ID, SerialTrainer, select_device

__all__ = ["METRIC_NAMES", "POLICY_ID", "SerialTrainer", "TorchPolicy", "TrainObserver", "TrainResult",
           "UpdateReport", "select_device"]
