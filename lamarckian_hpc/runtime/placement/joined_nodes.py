"""Nodes of actor jobs that join a running run and leave it, seen from the learner.

An actor job (`lamarckian-hpc join`, or the actor jobs of a launch) starts a Ray node on each of its
nodes that joins the run's cluster with the token from the run's join folder
(`storage.join_folder`), offering the resource `JOINED_NODE_RESOURCE`. Joined nodes are Ray nodes of
the run's cluster rather than processes that reach the learner by ZeroMQ alone: Ray already places,
starts, restarts and watches the actor and relay processes of every other node, and the same
mechanism then serves joined nodes, population workers included, with no second process manager.
Ray carries only placement and liveness; the data still goes over the run's ZeroMQ sockets.

Joining is a placement event: at most once per `interval_seconds` (between two receives of the
learner, never during an update) the learner asks Ray for nodes that offer the resource, starts a
relay on each new one, hung under the learner's own node as a first-layer relay of the tree (the
learner then holds one connection per joined node, never one per actor), and once the relay
answers, one actor per CPU of the node, which get the newest weights from the relay and credits
from the learner. Nothing that runs is restarted.

Leaving is an accounting event, in one of two ways:

- clean (time limit, scancel, preemption): the actor job writes `leaving/<label>` and waits; the
  learner stops the node's actors (each finishes the message it is sampling and sends it; Slurm's
  signal, which reaches every process of the job, does the same, and the relay forwards for as
  long), lets what they sent come up for DRAIN_SECONDS, closes their credit accounts (the credits
  they held return to the pool, never granted to them again), and answers `left/<label>`. A node
  that announced its leaving and is gone before then (Slurm's KillWait) has left the same way;
- lost (a node that died, or a job killed without its signal): Ray marks the node dead after its
  health checks fail, and the learner does the same without the wait.

The actors of a joined node carry indices after the run's own (`first_index` on), so their
messages, sequence numbers and credits are told apart from every other actor's.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ...comm import BROADCAST
from ...comm.relay import RelaySpec
from ...comm.topology import build_tree
from ...config import RunConfig
from ...storage.join_folder import JOINED_NODE_RESOURCE, JoinFolder
from .ray_actors import LEAVE_GRACE_SECONDS, start_actors, start_relay
from .relay_tree import node_label

log = logging.getLogger(__name__)

#: After a leaving node's actors were told to stop, how long they have to hand in their last
#: messages (as long as they have after their node's signal, `ray_actors.LEAVE_GRACE_SECONDS`).
DRAIN_SECONDS = LEAVE_GRACE_SECONDS


@dataclass
class JoinedNode:
    """One joined Ray node and what the learner placed on it."""

    label: str
    node_id: str
    cores: int
    relay: Any
    ipc_dir: str
    addresses: Any  # the relay's addresses, once it answers (an ObjectRef until then)
    seen_at: float
    indices: list[int] = field(default_factory=list)
    actors: list[Any] = field(default_factory=list)
    state: str = "starting"  # starting -> running -> draining, then removed
    drain_from: float = 0.0


@dataclass(frozen=True)
class JoinRoutes:
    """What the actors and relay of a joined node are given: the actors' config (naming the actor
    key folder), the run's shape (actors its messages and credits are sized for), the learner's
    TCP addresses, and the relay folder of the job's keys (made on the first join)."""

    config: RunConfig
    shape_actors: int
    root: str
    weights_address: str
    experience_address: str
    relay_key_folder: Callable[[], str | None]
    max_message_bytes: int
    bundle_wait_ms: float


class JoinedNodes:
    """The learner's view of the nodes that joined: places on new ones, lets go of leaving ones."""

    def __init__(self, folder: JoinFolder, routes: JoinRoutes, first_index: int,
                 on_added: Callable[[list[int]], None], on_removed: Callable[[list[int], str], None],
                 interval_seconds: float = 1.0) -> None:
        self.folder = folder
        self.routes = routes
        self.next_index = first_index
        self.on_added, self.on_removed = on_added, on_removed
        self.interval_seconds = interval_seconds
        self.nodes: dict[str, JoinedNode] = {}  # Ray node id -> node
        self.gone: set[str] = set()  # Ray node ids let go of: never placed on again
        self.joined = 0
        self.left_cleanly = 0
        self.lost = 0
        self.last_poll = 0.0

    @property
    def actors(self) -> int:
        return sum(len(node.indices) for node in self.nodes.values())

    def poll(self) -> None:
        """Admit new nodes, start the actors of those whose relay answers, let leaving and lost ones go."""
        now = time.monotonic()
        if now - self.last_poll < self.interval_seconds:
            return
        self.last_poll = now
        alive = {node["NodeID"]: node for node in ray.nodes()
                 if node.get("Alive") and node.get("Resources", {}).get(JOINED_NODE_RESOURCE)}
        leaving = set(self.folder.leaving())
        for node_id, node in self.nodes.copy().items():
            if node_id not in alive:  # gone: after it said so (its processes handed in what they held), or lost
                self._remove(node, "left" if node.label in leaving else "lost")
        for node_id, node in alive.items():
            if node_id not in self.nodes and node_id not in self.gone:
                self._admit(node_id, node)
        for node in list(self.nodes.values()):
            if node.state == "starting" and node.label not in leaving:
                self._start_actors(node)
            if node.label in leaving and node.state != "draining":
                self._stop_actors(node)
            if node.state == "draining" and now >= node.drain_from + DRAIN_SECONDS:
                self._remove(node, "left")

    def _admit(self, node_id: str, node: dict[str, Any]) -> None:
        routes = self.routes
        label = node_label(node)
        cores = max(1, int(node["Resources"].get("CPU", 1)))
        ipc_dir = os.path.join(tempfile.gettempdir(), f"lhpc-j{uuid.uuid4().hex[:10]}")
        spec = RelaySpec(label, build_tree([routes.root, label]).to_dict(), {routes.root: routes.weights_address},
                         host="", ipc_path=os.path.join(ipc_dir, "w.ipc"), key_folder=routes.relay_key_folder(),
                         max_message_bytes=routes.max_message_bytes,
                         experience_upstreams={routes.root: routes.experience_address},
                         experience_ipc_path=os.path.join(ipc_dir, "e.ipc"), bundle_wait_ms=routes.bundle_wait_ms)
        relay = start_relay(spec, NodeAffinitySchedulingStrategy(node_id, soft=False), graceful_leave=True)
        self.nodes[node_id] = JoinedNode(label, node_id, cores, relay, ipc_dir, relay.addresses.remote(),
                                         time.monotonic())
        self.joined += 1
        log.info("node %s joined the run with %d CPUs; placing its relay", label, cores)

    def _start_actors(self, node: JoinedNode) -> None:
        ready, _ = ray.wait([node.addresses], timeout=0)
        if not ready:
            return
        try:
            ray.get(node.addresses)
        except ray.exceptions.RayError as error:  # the node went meanwhile; the next poll removes it
            log.warning("the relay of joined node %s did not start: %s", node.label, error)
            node.addresses = node.relay.addresses.remote()
            return
        node.indices = list(range(self.next_index, self.next_index + node.cores))
        self.next_index += node.cores
        routes = self.routes
        weights, experience = f"ipc://{node.ipc_dir}/w.ipc", f"ipc://{node.ipc_dir}/e.ipc"
        self.on_added(node.indices)
        node.actors = start_actors(routes.config, node.cores, weights, experience,
                                   lambda _: NodeAffinitySchedulingStrategy(node.node_id, soft=False),
                                   [BROADCAST] * node.cores, first_index=node.indices[0],
                                   shape_actors=routes.shape_actors, graceful_leave=True)
        node.state = "running"
        log.info("node %s: %d actors (%d to %d) started after %.1f s", node.label, node.cores, node.indices[0],
                 node.indices[-1], time.monotonic() - node.seen_at)

    def _stop_actors(self, node: JoinedNode) -> None:
        """Each actor finishes the message it is sampling, sends it and stops (the learner does not
        wait for it: the node drains meanwhile). Their own signal may have stopped them already."""
        for actor in node.actors:
            actor.stop.remote()
        node.state, node.drain_from = "draining", time.monotonic()

    def _end(self, node: JoinedNode) -> None:
        for handle in [*node.actors, node.relay]:
            ray.kill(handle, no_restart=True)
        # The relay's sockets' folder: a killed relay leaves it (a node's own /tmp goes with the node;
        # where the file system is shared, it would stay).
        shutil.rmtree(node.ipc_dir, ignore_errors=True)

    def _remove(self, node: JoinedNode, how: str) -> None:
        self._end(node)
        del self.nodes[node.node_id]
        self.gone.add(node.node_id)
        if node.indices:
            self.on_removed(node.indices, how)
        if how == "left":
            self.left_cleanly += 1
            self.folder.mark_left(node.label)
        else:
            self.lost += 1
        log.warning("node %s %s the run: %d actors fewer, %d joined nodes left", node.label,
                    "left" if how == "left" else "was lost to", len(node.indices), len(self.nodes))

    def close(self) -> None:
        for node in self.nodes.values():
            self._end(node)
        self.nodes = {}
