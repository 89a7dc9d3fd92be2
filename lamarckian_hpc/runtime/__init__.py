"""The processes of a run and the loops that feed the algorithms."""

from .inference import TorchPolicy
from .learner import make_learner, select_device
from .observers import TrainObserver, TrainResult, UpdateReport
from .sampling import POLICY_ID
from .trainer import METRIC_NAMES, SerialTrainer

__all__ = ["METRIC_NAMES", "POLICY_ID", "make_learner", "SerialTrainer", "TorchPolicy", "TrainObserver",
           "TrainResult", "UpdateReport", "select_device"]
