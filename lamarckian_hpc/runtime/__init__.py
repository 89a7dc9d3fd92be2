"""The processes of a run and the loops that feed the algorithms."""

from .inference import TorchPolicy
from .learner import PPOLearner, select_device
from .observers import TrainObserver, TrainResult, UpdateReport
from .sampling import POLICY_ID
from .trainer import METRIC_NAMES, SerialTrainer

__all__ = ["METRIC_NAMES", "POLICY_ID", "PPOLearner", "SerialTrainer", "TorchPolicy", "TrainObserver",
           "TrainResult", "UpdateReport", "select_device"]
