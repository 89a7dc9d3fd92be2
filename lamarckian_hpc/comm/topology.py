"""The shape of the weight broadcast: a tree of at most three layers over the run's nodes.

The learner sits on the first node. With a flat layout it would send every weight version to every
node itself, so its network link carries O(n) copies and the last node waits O(n). Following the
Lamarckian paper (section III-B1) the nodes form a tree of at most three layers instead:
learner -> relay nodes -> leaf nodes, with a fan-out of ceil(sqrt(n)). The learner then sends
O(sqrt n) copies and the relays forward to their leaves in parallel. The actors of a node read from
that node's relay (or the learner, on the first node) over IPC, so they are not part of the tree.

The layers are filled in breadth-first order, as in a complete N-ary tree: the learner's children
are the next `fanout` nodes (the relays), and the remaining nodes are spread evenly over the
relays, so no relay serves more than one leaf more than another. This module is pure (no sockets):
the runtime and the cluster launcher both derive the same tree from the same node list, and the
run file stores it (`to_dict`) in `/meta` as `broadcast_tree`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

MAX_LAYERS = 3


def default_fanout(n_nodes: int) -> int:
    """ceil(sqrt(n)): with this fan-out the learner and two relay layers reach n nodes in 3 layers."""
    return math.isqrt(max(n_nodes, 1) - 1) + 1


@dataclass(frozen=True)
class BroadcastTree:
    """Who sends weights to whom. `parents[i]` is the index of node i's parent, -1 for the root.

    Parents always precede their children in `nodes`, so a sender is started before its receivers.
    """

    nodes: tuple[str, ...]
    parents: tuple[int, ...]
    fanout: int

    def __post_init__(self) -> None:
        if not self.nodes:
            raise ValueError("broadcast tree: nodes must not be empty")
        if len(self.parents) != len(self.nodes):
            raise ValueError(f"broadcast tree: parents has {len(self.parents)} entries for {len(self.nodes)} nodes")
        if self.parents[0] != -1:
            raise ValueError("broadcast tree: parents[0] must be -1 (the learner is the root)")
        if len(set(self.nodes)) != len(self.nodes):
            raise ValueError("broadcast tree: node names must be unique")
        if self.fanout < 1:
            raise ValueError(f"broadcast tree: fanout must be >= 1, got {self.fanout}")
        parents = np.asarray(self.parents[1:], dtype=np.int64)
        bad = np.flatnonzero((parents < 0) | (parents >= np.arange(1, len(self.nodes))))
        if bad.size:
            i = int(bad[0]) + 1
            raise ValueError(f"broadcast tree: parent of node {i} must be an earlier node, got {self.parents[i]}")

    # -- lookups ---------------------------------------------------------------------------------
    @cached_property
    def _index(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.nodes)}

    @cached_property
    def _children(self) -> tuple[tuple[int, ...], ...]:
        kids: list[list[int]] = [[] for _ in self.nodes]
        for i, p in enumerate(self.parents[1:], start=1):
            kids[p].append(i)
        return tuple(tuple(k) for k in kids)

    def index_of(self, node: str) -> int:
        """Position of `node` in `nodes`; a clear error for a node that is not in the tree."""
        try:
            return self._index[node]
        except KeyError:
            raise KeyError(f"broadcast tree: unknown node {node!r}") from None

    @property
    def root(self) -> str:
        """The learner's node."""
        return self.nodes[0]

    def parent_of(self, node: str) -> str | None:
        """The node `node` receives weights from; None for the learner's node."""
        p = self.parents[self.index_of(node)]
        return None if p < 0 else self.nodes[p]

    def children_of(self, node: str) -> tuple[str, ...]:
        """The nodes `node` forwards weights to, in order."""
        return tuple(self.nodes[c] for c in self._children[self.index_of(node)])

    def layer_of(self, node: str) -> int:
        """0 for the learner, 1 for the nodes it sends to directly, 2 below them."""
        i, layer = self.index_of(node), 0
        while self.parents[i] >= 0:
            i, layer = self.parents[i], layer + 1
        return layer

    @property
    def depth(self) -> int:
        """Number of layers, the learner's included (1 for a single node, at most 3 from build_tree)."""
        layers = [0] * len(self.nodes)
        for i, p in enumerate(self.parents[1:], start=1):
            layers[i] = layers[p] + 1
        return max(layers) + 1

    @property
    def relays(self) -> tuple[str, ...]:
        """Nodes other than the learner's that forward to at least one other node."""
        return tuple(self.nodes[i] for i in range(1, len(self.nodes)) if self._children[i])

    @property
    def max_children(self) -> int:
        """The largest number of nodes any one node sends to (its copies per version)."""
        return max((len(k) for k in self._children), default=0)

    # -- change ----------------------------------------------------------------------------------
    def reattach(self, dead_node: str) -> BroadcastTree:
        """The tree without `dead_node`, its children attached to its parent.

        The learner's node cannot be removed: without it there is nothing to broadcast.
        """
        dead = self.index_of(dead_node)
        if dead == 0:
            raise ValueError(f"broadcast tree: cannot remove the learner's node {dead_node!r}")
        grand = self.parents[dead]
        keep = [i for i in range(len(self.nodes)) if i != dead]
        new_index = {old: new for new, old in enumerate(keep)}
        parents = []
        for i in keep:
            p = self.parents[i]
            parents.append(-1 if p < 0 else new_index[grand if p == dead else p])
        return BroadcastTree(tuple(self.nodes[i] for i in keep), tuple(parents), self.fanout)

    # -- storage ---------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form, stored as `broadcast_tree` in the run file's `/meta`."""
        return {"nodes": list(self.nodes), "parents": list(self.parents), "fanout": self.fanout}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BroadcastTree:
        """The inverse of `to_dict`; it validates the shape like the constructor does."""
        try:
            return cls(tuple(str(n) for n in data["nodes"]), tuple(int(p) for p in data["parents"]), int(data["fanout"]))
        except KeyError as exc:
            raise ValueError(f"broadcast tree: missing field {exc.args[0]!r} (need nodes, parents, fanout)") from None


def tree_parents(n_nodes: int, fanout: int) -> np.ndarray:
    """Parent indices of the three-layer tree over n nodes (index 0 is the learner's node).

    The learner's children are nodes 1..r with r = min(fanout, n-1); the remaining leaves go to the
    relays round-robin, so each relay serves ceil(leaves / r) nodes at most. Raises when `fanout`
    is too small for three layers (fanout + fanout**2 < n - 1).
    """
    if n_nodes < 1:
        raise ValueError(f"broadcast tree: need at least one node, got {n_nodes}")
    if fanout < 1:
        raise ValueError(f"broadcast tree: fanout must be >= 1, got {fanout}")
    if fanout + fanout * fanout < n_nodes - 1:
        raise ValueError(
            f"broadcast tree: fanout {fanout} cannot reach {n_nodes} nodes in {MAX_LAYERS} layers "
            f"(need fanout + fanout^2 >= {n_nodes - 1})"
        )
    relays = min(fanout, n_nodes - 1)
    parents = np.empty(n_nodes, dtype=np.int64)
    parents[0] = -1
    parents[1 : relays + 1] = 0
    if n_nodes > relays + 1:
        parents[relays + 1 :] = 1 + np.arange(n_nodes - 1 - relays) % relays
    return parents


def build_tree(nodes: Sequence[str], fanout: int | None = None) -> BroadcastTree:
    """The broadcast tree over `nodes`; the learner runs on `nodes[0]`.

    `fanout` defaults to ceil(sqrt(len(nodes))), the paper's choice, which keeps the tree at three
    layers or fewer for any number of nodes.
    """
    names = tuple(nodes)
    f = default_fanout(len(names)) if fanout is None else int(fanout)
    return BroadcastTree(names, tuple(tree_parents(len(names), f).tolist()), f)
