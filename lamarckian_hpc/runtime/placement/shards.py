"""Which learner rank takes each actor's experience: a fixed shard of the actors per rank.

Every rank of a policy's learner group has its own experience receiver and credit budget, and
trains on what its shard sends; the global batch is the sum of the shards. A shard is fixed for the
run (SRL's static routing), so a rank's receiver, credits and sequence numbers never move:

- flat (one host, or every actor connected to a learner): the actors are dealt in contiguous
  blocks, which on a cluster are the actors of whole nodes, since actors are placed node by node;
- tree: a node's relay sends its experience (its own actors' and its subtree's) to one rank. Rank 0
  keeps its own node's actors, and the subtrees under the root go, largest first, to the rank that
  holds the fewest actors so far.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

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


def plan_tree(tree: BroadcastTree, names: Sequence[str], actor_nodes: Sequence[int], world_size: int) -> ShardPlan:
    """Whole subtrees under the root to ranks (see the module's docstring); `names`: the node of
    each index, the root first; `actor_nodes`: the node index of every actor."""
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
    return ShardPlan(world_size, tuple(node_ranks[node] for node in actor_nodes), tuple(node_ranks))
