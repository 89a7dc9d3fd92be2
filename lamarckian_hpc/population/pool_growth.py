"""A population's Ray pool that grows onto the nodes of actor jobs that join the run, and gives
them up when they leave (`lamarckian-hpc join`, a launch's actor jobs: `storage.join_folder`).

Members live in the workers (PBT's learners, the league's), so workers move only between two
generations, where the workflow holds every member's state: at the start of a generation the pool
takes one worker per CPU of each node that joined (at most one worker per member), the members
are shared out again, and those whose worker is new resume from the state they ended the last
generation with. Nothing is redone. A node that says it leaves is given up at the next start in
the same way, and then let go (`left/<label>`); one that goes in the middle of a generation (its
job's time ran out first, or it died) takes its workers' part of the generation with it: the
workflow's lost-worker path resumes their members on the other workers from the same states and
runs that part again. Stateless pools (evaluations) grow and shrink alike, with nothing to restore.

The pool's own workers stay on the run's own nodes (pinned there softly: a full node lends to
another), so that joined nodes only ever hold the workers placed for them.
"""

from __future__ import annotations

import logging
from itertools import zip_longest

import ray

from ..runtime.placement.relay_tree import node_label
from ..storage.join_folder import JOINED_NODE_RESOURCE, JoinFolder
from .worker_pool import RayPool

log = logging.getLogger(__name__)


class PoolGrowth:
    """Follows the run's joined nodes for one Ray pool; `follow` at the start of every generation."""

    def __init__(self, folder: JoinFolder, pool: RayPool) -> None:
        self.folder, self.pool = folder, pool
        self.own_workers = pool.num_workers  # the pool's size on the run's own nodes
        self.joined: dict[str, str] = {}  # Ray node id -> label, of the nodes the pool has workers on
        self.gone: set[str] = set()  # Ray node ids given up: never placed on again

    def follow(self) -> tuple[list[int], str | None]:
        """Regroup the pool if nodes joined or leave: the workers whose members need restoring, and
        a line saying what changed (None where nothing did)."""
        nodes = [node for node in ray.nodes() if node.get("Alive")]
        leaving = set(self.folder.leaving())
        joined = {node["NodeID"]: node for node in nodes if node.get("Resources", {}).get(JOINED_NODE_RESOURCE)
                  and node["NodeID"] not in self.gone and node_label(node) not in leaving}
        renewed: list[int] = []
        line = None
        if joined.keys() != self.joined.keys():
            came = [node_label(joined[node_id]) for node_id in joined if node_id not in self.joined]
            went = [label for node_id, label in self.joined.items() if node_id not in joined]
            self.gone.update(node_id for node_id in self.joined if node_id not in joined)
            own = sorted(node["NodeID"] for node in nodes if not node.get("Resources", {}).get(JOINED_NODE_RESOURCE))
            placements = [(own[worker % len(own)], True) for worker in range(self.own_workers)] if own else []
            per_node = [[(node_id, False)] * max(1, int(node["Resources"].get("CPU", 1)))
                        for node_id, node in joined.items()]
            # Interleaved, so that a pool capped at its members still takes every joined node.
            placements += [placement for column in zip_longest(*per_node) for placement in column if placement]
            renewed = self.pool.regroup(placements)
            self.joined = {node_id: node_label(node) for node_id, node in joined.items()}
            hosts = len(set(self.pool.host_names))
            change = "; ".join(part for part in (f"joined: {', '.join(came)}" if came else "",
                                                 f"left: {', '.join(went)}" if went else "") if part)
            line = f"pool: {self.pool.num_workers} workers on {hosts} hosts ({change})"
            log.info("%s", line)
        let_go = set(self.folder.left())
        for label in leaving - let_go - set(self.joined.values()):
            self.folder.mark_left(label)
        return renewed, line
