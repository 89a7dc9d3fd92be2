"""The processes of a training run and the loops that feed the algorithms. The population workflow
(PBT, EMOGI, the league, the EC algorithms) is in `lamarckian_hpc.population`, which builds on this.

Only names that need no torch are re-exported here: every actor process imports this package,
and one that only acts must not load torch. The torch side is imported from its modules:
`runtime.runners.trainer.SerialTrainer`, `runtime.algorithms.make_learner`, `runtime.actor.inference.TorchPolicy`.
"""

from .observers import TrainObserver, TrainResult, UpdateReport
from .run_shape import POLICY_ID

__all__ = ["POLICY_ID", "TrainObserver", "TrainResult", "UpdateReport"]
