"""Which learner rank takes each actor's experience: a fixed shard of the actors per rank.

Every rank of a policy's learner group has its own experience receiver and credit budget, and
trains on what its shard sends; the global batch is the sum of the shards. A shard is fixed for the
run (SRL's static routing), so a rank's receiver, credits and sequence numbers never move:

- flat (one host, or every actor connected to a learner): the actors are dealt in contiguous
  blocks, which on a cluster are the actors of whole nodes, since actors are placed node by node;
- tree: a node's relay sends its experience (its own actors' and its subtree's) to one rank. Rank 0
  keeps its own node's actors, and the subtrees under the root go, largest first, to the rank that
  holds the fewest actors so far. Whole subtrees keep the relays' aggregation, but a tree has only
  about sqrt(n) of them (two under the root of a 4-node tree): where a rank 1.. would still hold
  fewer actors than another by more than a leaf's, the leaf leaves its subtree for that rank, and
  its relay sends its experience straight to the rank instead of through its parent. Without that,
  4 ranks on 4 nodes hold 2, 0, 2 and 4 of 8 actors, and the lockstep runs at the pace of the
  rank with half the batch. Ranks 1.. are interchangeable in the plan, so each then takes, where it
  can, the shard that holds its own node: that node's experience stays on its host.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ...comm.topology import BroadcastTree


@dataclass(frozen=True)
class ShardPlan:
    """The rank of every actor and, in a tree, of every node's relay."""

    world_size: int
    actor_ranks: tuple[int, ...]
    node_ranks: tuple[int, ...] = ()  # by node index (tree only); node 0, the root, is rank 0's

    def actors_of(self, rank: int) -> list[int]:
        return [index for index, owner in enumerate(self.actor_ranks) if owner == rank]

    def share(self, batch_steps: int, rank: int) -> int:
        """Steps `rank` gathers per update: its actors' part of the batch (at least one step where it
        has actors, so the shares add up to the batch or a little more)."""
        actors = len(self.actors_of(rank))
        return math.ceil(batch_steps * actors / len(self.actor_ranks)) if actors else 0

    def credit_budget(self, budget: int, rank: int) -> int:
        """`rank`'s part of the run's credit budget (`sampling.credit_budget`), one credit at least."""
        return max(1, math.ceil(budget * len(self.actors_of(rank)) / len(self.actor_ranks)))


def plan_flat(num_actors: int, world_size: int) -> ShardPlan:
    """Contiguous blocks of actors, as even as the counts allow."""
    return ShardPlan(world_size, tuple(index * world_size // num_actors for index in range(num_actors)))


def plan_tree(tree: BroadcastTree, names: Sequence[str], actor_nodes: Sequence[int], world_size: int,
              rank_nodes: Sequence[int] | None = None) -> ShardPlan:
    """Whole subtrees under the root to ranks, then leaves to starved ranks, then ranks near their
    nodes (see the module's docstring); `names`: the node of each index, the root first;
    `actor_nodes`: the node index of every actor; `rank_nodes`: the node index each rank runs on,
    where known."""
    index_of = {name: index for index, name in enumerate(names)}
    counts = [list(actor_nodes).count(node) for node in range(len(names))]

    def subtree(name: str) -> list[int]:
        nodes = [index_of[name]]
        for child in tree.children_of(name):
            nodes += subtree(child)
        return nodes

    node_ranks = [0] * len(names)
    held = [0] * world_size
    held[0] = counts[0]
    subtrees = [subtree(child) for child in tree.children_of(tree.root)]
    # Ties go to the highest rank, so that ranks 1.. get work before rank 0 takes more.
    for nodes in sorted(subtrees, key=lambda part: -sum(counts[node] for node in part)):
        rank = min(range(world_size), key=lambda r: (held[r], -r))
        held[rank] += sum(counts[node] for node in nodes)
        for node in nodes:
            node_ranks[node] = rank
    # Leaves (nodes under a relay) move to the rank 1.. holding the fewest actors while that narrows
    # the gap: each move lowers the sum of squares of the holdings, so this ends.
    leaves = [index_of[name] for name in names if tree.layer_of(name) == 2]
    while world_size > 1:
        fewest = min(range(1, world_size), key=lambda r: (held[r], -r))
        moves = [node for node in leaves if counts[node] and held[fewest] + counts[node] < held[node_ranks[node]]]
        if not moves:
            break
        node = max(moves, key=lambda n: (held[node_ranks[n]], counts[n]))
        held[node_ranks[node]] -= counts[node]
        held[fewest] += counts[node]
        node_ranks[node] = fewest
    if rank_nodes is not None:
        node_ranks = near_their_nodes(node_ranks, rank_nodes, world_size)
    return ShardPlan(world_size, tuple(node_ranks[node] for node in actor_nodes), tuple(node_ranks))


def near_their_nodes(node_ranks: Sequence[int], rank_nodes: Sequence[int], world_size: int) -> list[int]:
    """`node_ranks` with ranks 1.. relabelled so that a rank takes, where it can, the shard holding
    the node it runs on (`rank_nodes[rank]`); rank 0's shard stays rank 0's."""
    label: dict[int, int] = {}  # a shard, named by its rank in `node_ranks` -> the rank that takes it
    for rank in range(1, world_size):
        shard = node_ranks[rank_nodes[rank]]
        if shard and shard not in label:
            label[shard] = rank
    free = iter(sorted(set(range(1, world_size)) - set(label.values())))
    for shard in range(1, world_size):
        if shard not in label:
            label[shard] = next(free)
    return [label[shard] if shard else 0 for shard in node_ranks]
