"""The paths between the learner and its actors: `runtime.broadcast` flat or tree (auto picks).

flat: every actor connects to the learner itself, its weights publisher (XPUB) and its experience
receiver (ROUTER), so the learner's link carries one copy of each version per actor and it holds
two connections per actor. tree: the actors are grouped by node; the learner's node is the root
of the three-layer tree of `comm.topology`, every other node runs one relay (a Ray actor pinned to
that node), and the actors of a node talk over IPC to their node's relay (the learner's node's
actors to the learner itself): weights come down, experience goes up and credits come back
down through it. The learner then holds one connection per relay it feeds. auto, the default:
the tree when the run's actors are on more than one host, flat on one host.

Nodes are the Ray cluster's alive nodes, the learner's first. `runtime.simulated_nodes` instead
groups the actors into that many simulated nodes on the local host: each gets its own relay
process and IPC endpoints, exactly as a separate host would, but all share one machine's cores and
loopback, so it shows the tree working, not the network savings of real hosts.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from typing import Any

import ray
import zmq
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ...comm import BROADCAST, LEARNER, ExperienceReceiver, JobKeys, WeightPublisher, limit_bytes
from ...comm.relay import RelaySpec
from ...comm.topology import BroadcastTree, build_tree
from ...config import RunConfig
from ...storage.join_folder import JOINED_NODE_RESOURCE
from .ray_actors import start_relay
from .ray_setup import answers
from .shards import ShardPlan

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RankRoutes:
    """Where each shard's experience goes when a policy has several learner ranks: the shards
    (`learner.shards`) and the experience address of ranks 1.. (rank 0's is the receiver's)."""

    shards: ShardPlan
    addresses: tuple[str, ...]


@dataclass(frozen=True)
class NodePlan:
    """The run's nodes (the learner's first), the Ray node of each (None when simulated) and the
    node of every actor."""

    names: tuple[str, ...]
    ray_node_ids: tuple[str | None, ...]
    actor_nodes: tuple[int, ...]

    def scheduling(self, node: int) -> NodeAffinitySchedulingStrategy | None:
        node_id = self.ray_node_ids[node]
        return None if node_id is None else NodeAffinitySchedulingStrategy(node_id, soft=False)


def plan_nodes(config: RunConfig, num_actors: int) -> NodePlan:
    """Actors in contiguous blocks over the nodes, as a per-node actor count on a cluster gives."""
    simulated = config.runtime.simulated_nodes
    if simulated is not None:
        names: tuple[str, ...] = tuple(f"sim{i}" for i in range(simulated))
        ids: tuple[str | None, ...] = (None,) * simulated
    else:
        here = ray.get_runtime_context().get_node_id()
        # Nodes of actor jobs are placed on as they join (`joined_nodes`), never in the run's own plan.
        alive = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0
                 and not n.get("Resources", {}).get(JOINED_NODE_RESOURCE)]
        labels = [node_label(n) for n in alive]
        if len(set(labels)) < len(labels):  # several Ray nodes on one host: tell them apart
            labels = [f"{label}:{n['NodeID'][:8]}" for label, n in zip(labels, alive)]
        order = sorted(range(len(alive)), key=lambda i: (alive[i]["NodeID"] != here, _natural(labels[i])))
        names = tuple(labels[i] for i in order) or ("local",)
        # Pinned where there is more than one node, or may be (joined nodes must not take the run's own actors).
        pinned = len(alive) > 1 or (config.runtime.join_folder is not None and len(alive) == 1)
        ids = tuple(alive[i]["NodeID"] for i in order) if pinned else (None,)
    count = len(names)
    return NodePlan(names, ids, tuple(i * count // num_actors for i in range(num_actors)))


def node_label(node: dict[str, Any]) -> str:
    """The node's name: the `node:<name>` resource a cluster launch gives each Ray node (the Slurm
    node name), else its host name. Ray's own `node:<ip>` resources are not names."""
    for resource in node.get("Resources", {}):
        name = resource.removeprefix("node:")
        if resource.startswith("node:") and not name.startswith("__"):
            try:
                ipaddress.ip_address(name)
            except ValueError:
                return name
    return str(node["NodeManagerHostname"])


def _natural(name: str) -> list[Any]:
    """node2 before node10, as Slurm lists them."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def choose_layout(setting: str, plan: NodePlan) -> str:
    """flat or tree for `runtime.broadcast`: auto is the tree when actors are on several nodes."""
    if setting != "auto":
        return setting
    return "tree" if len(set(plan.actor_nodes)) > 1 else "flat"


class RelayTree:
    """The learner's publisher and receiver, the relays of the tree, and the addresses every actor
    is given for weights and for experience (with the key role of the server it reaches there)."""

    def __init__(self, config: RunConfig, context: zmq.Context, num_actors: int, host: str,
                 receiver: ExperienceReceiver, keys: JobKeys | None = None, plan: NodePlan | None = None,
                 ranks: RankRoutes | None = None) -> None:
        """`host`: the learner's address that every actor and relay reaches (loopback only when
        the run's Ray is on this host alone); `receiver`: the learner's experience receiver (rank
        0's); `plan`: the nodes, when the caller has planned them; `ranks`: where the experience of
        each shard goes when the policy has several learner ranks."""
        self.plan = plan if plan is not None else plan_nodes(config, num_actors)
        self.layout = choose_layout(config.runtime.broadcast, self.plan)
        self.ranks = ranks
        self.publisher = WeightPublisher(context, host=host, keys=keys)
        self.receiver = receiver
        # Relays get the relay folder of the keys (never the learner's secret); only a tree has one.
        self.key_folder = None if keys is None or self.layout != "tree" else str(keys.write_relay_folder())
        self.max_message_bytes = limit_bytes(config.runtime.max_message_megabytes)
        self.bundle_wait_ms = config.runtime.relay_bundle_ms
        self.tree: BroadcastTree | None = None
        self.relays: dict[str, Any] = {}
        self.ipc_dir: str | None = None
        if self.layout == "flat":
            self.actor_addresses = [self.publisher.address] * num_actors
            self.experience_addresses = [receiver.address] * num_actors
            self.experience_servers = [LEARNER] * num_actors
            if ranks is not None:  # ranks 1.. serve their shards with the broadcast pair, as relays do
                for index, rank in enumerate(ranks.shards.actor_ranks):
                    if rank:
                        self.experience_addresses[index] = ranks.addresses[rank - 1]
                        self.experience_servers[index] = BROADCAST
            return
        self.tree = build_tree(self.plan.names)
        # Short paths: IPC endpoints are limited to about 100 bytes.
        self.ipc_dir = os.path.join(tempfile.gettempdir(), f"lhpc-{uuid.uuid4().hex[:10]}")
        os.makedirs(self.ipc_dir, mode=0o700, exist_ok=True)
        weights = [os.path.join(self.ipc_dir, f"{i}.ipc") for i in range(len(self.plan.names))]
        experience = [os.path.join(self.ipc_dir, f"{i}e.ipc") for i in range(len(self.plan.names))]
        self.publisher.socket.bind(f"ipc://{weights[0]}")
        receiver.bind_ipc(experience[0])
        # A relay binds on the address of the node Ray put it on ("" below), unless all is local.
        self._start_relays(weights, experience, "127.0.0.1" if host == "127.0.0.1" else "")
        self.actor_addresses = [f"ipc://{weights[node]}" for node in self.plan.actor_nodes]
        self.experience_addresses = [f"ipc://{experience[node]}" for node in self.plan.actor_nodes]
        self.experience_servers = [LEARNER if node == 0 else BROADCAST for node in self.plan.actor_nodes]

    def _start_relays(self, weights: list[str], experience: list[str], host: str) -> None:
        """Start the relays layer by layer, so each is given the addresses of the nodes above it."""
        assert self.tree is not None
        addresses = {self.tree.root: self.publisher.address}
        experience_addresses = {self.tree.root: self.receiver.address}
        shard_of_node = self.ranks.shards.node_ranks if self.ranks else [0] * len(self.plan.names)
        node_ranks = dict(zip(self.plan.names, shard_of_node))
        for layer in (1, 2):
            started = {}
            for index, node in enumerate(self.tree.nodes):
                if index and self.tree.layer_of(node) == layer:
                    upstreams = dict(experience_addresses)
                    rank = node_ranks[node]
                    if rank:  # the subtree's experience goes to its learner rank, in place of the root
                        upstreams[self.tree.root] = self.ranks.addresses[rank - 1]  # type: ignore[union-attr]
                        if node_ranks[self.tree.parent_of(node)] != rank:  # type: ignore[index]
                            # a leaf moved out of its parent's shard: straight to its rank, whatever its parent
                            upstreams = dict.fromkeys(upstreams, upstreams[self.tree.root])
                    spec = RelaySpec(node, self.tree.to_dict(), dict(addresses), host=host, ipc_path=weights[index],
                                     key_folder=self.key_folder, max_message_bytes=self.max_message_bytes,
                                     experience_upstreams=upstreams, experience_ipc_path=experience[index],
                                     experience_rank=rank, bundle_wait_ms=self.bundle_wait_ms)
                    started[node] = start_relay(spec, self.plan.scheduling(index))
            for node, (weights_address, experience_address) in zip(
                    started, answers([relay.addresses.remote() for relay in started.values()], "the relays")):
                addresses[node] = weights_address
                experience_addresses[node] = experience_address
            self.relays.update(started)

    def meta(self) -> dict[str, Any]:
        """What the run file's /meta records of the layout used: flat or tree, the tree over the
        nodes (a tree run only), the actors planned per node (and per learner rank, with several),
        and the learner's TCP addresses for weights and experience (for an operator who needs to
        reach the learner of a running job: they admit only holders of the job's keys)."""
        counts = [self.plan.actor_nodes.count(node) for node in range(len(self.plan.names))]
        if self.tree is None:
            connections = len(self.plan.actor_nodes)
        else:  # the relays of the first layer and the learner's node's own actors
            connections = counts[0] + sum(1 for name in self.plan.names[1:] if self.tree.parent_of(name) == self.tree.root)
        meta: dict[str, Any] = {"broadcast_layout": self.layout, "learner_experience_connections": connections,
                                "actors_per_node": dict(zip(self.plan.names, counts)),
                                "learner_weights_address": self.publisher.address,
                                "learner_experience_address": self.receiver.address}
        if self.tree is not None:
            meta["broadcast_tree"] = self.tree.to_dict()
        if self.ranks is not None:
            shards = self.ranks.shards
            meta["actors_per_learner_rank"] = [len(shards.actors_of(rank)) for rank in range(shards.world_size)]
        return meta

    def actor_scheduling(self, actor_index: int) -> NodeAffinitySchedulingStrategy | None:
        """Where an actor must run: on its node when nodes are real Ray nodes, anywhere otherwise."""
        return self.plan.scheduling(self.plan.actor_nodes[actor_index])

    def relay_stats(self) -> dict[str, dict[str, Any]]:
        """Forwarded versions, re-attachments and current parent of every relay that answers."""
        names = list(self.relays)
        replies = [self.relays[name].stats.remote() for name in names]
        ready, _ = ray.wait(replies, num_returns=len(replies), timeout=5.0)
        stats = {}
        for name, reply in zip(names, replies):
            if reply in ready:
                try:
                    stats[name] = ray.get(reply)
                except ray.exceptions.RayError:  # restarting after a failure: no stats this time
                    pass
        return stats

    def close(self) -> None:
        self.publisher.close()  # first: see DistributedTrainer.close
        for relay in self.relays.values():
            ray.kill(relay, no_restart=True)
        self.relays = {}
        if self.ipc_dir is not None:
            shutil.rmtree(self.ipc_dir, ignore_errors=True)
