"""Noticing that a node of a multi-node run is gone, and doing what `runtime.on_node_loss` says.

A lost node (a crashed host, a killed slurmd and everything of the job on it) takes its Ray raylet
and its actors with it. Ray's control store marks the node dead once its health checks have failed
for `runtime.node_loss_seconds` (a Slurm job's Ray is started so, `cluster.ray_node.health_check_env`;
a shorter silence is ridden through); the learner itself would only see fewer messages arrive. This observer
asks Ray which of the run's nodes are still alive, at most once per `interval_seconds`, after an
update or while the distributed learner waits for experience (`on_wait`), and then either stops
the run with `NodeLostError` naming the node (`fail`: the learner's state is whole, so
`run_training` saves a checkpoint first and a resume loses no update) or logs the loss once and
lets training go on with the actors of the nodes left (`continue`: the learner already takes
experience from whichever actors send it; asynchronous sampling only, see `RuntimeConfig`).

It must not be used for the head node: the driver runs there and is lost with it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Literal

from ..observers import TrainResult, UpdateReport

log = logging.getLogger(__name__)


class NodeLostError(RuntimeError):
    """A node of the run stopped answering; the message is one line that names it."""


def dead_nodes(node_ids: Mapping[str, str]) -> list[str]:
    """The labels among `node_ids` (label -> Ray node id) whose Ray node is no longer alive."""
    import ray

    alive = {node["NodeID"] for node in ray.nodes() if node.get("Alive")}
    return [label for label, node_id in node_ids.items() if node_id not in alive]


class NodeWatch:
    """An observer of the training loop: checks the run's Ray nodes but the head (label -> Ray
    node id) and acts on a lost one."""

    def __init__(self, node_ids: Mapping[str, str], policy: Literal["fail", "continue"], head: str,
                 interval_seconds: float = 1.0) -> None:
        self.node_ids = {label: node_id for label, node_id in node_ids.items() if label != head}
        self.policy = policy
        self.interval_seconds = interval_seconds
        self.lost: list[str] = []
        self.lost_at_version: dict[str, int] = {}
        self.last_check = 0.0

    def on_update_end(self, report: UpdateReport) -> None:
        self.check(report.policy_version, report.env_frames)

    def on_wait(self, policy_version: int, env_frames: int) -> None:
        """Called by the distributed trainer while no experience arrives (no update may come)."""
        self.check(policy_version, env_frames)

    def check(self, policy_version: int, env_frames: int) -> None:
        if time.monotonic() - self.last_check < self.interval_seconds:
            return
        self.last_check = time.monotonic()
        newly = [label for label in dead_nodes(self.node_ids) if label not in self.lost]
        if not newly:
            return
        self.lost += newly
        self.lost_at_version.update({label: policy_version for label in newly})
        names = ", ".join(newly)
        if self.policy == "fail":
            raise NodeLostError(
                f"node {names} was lost at policy version {policy_version} ({env_frames:,} frames): its Ray "
                f"node stopped answering; the run stops (runtime.on_node_loss=fail) with a checkpoint to resume from")
        left = len(self.node_ids) + 1 - len(self.lost)
        log.warning("node %s was lost at policy version %d; training continues on the %d nodes left "
                    "(runtime.on_node_loss=continue)", names, policy_version, left)

    def on_train_end(self, result: TrainResult) -> None:
        pass
