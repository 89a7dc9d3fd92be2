"""Shape of the broadcast tree for every node count from 1 to 6000, and its repair when a relay dies."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from lamarckian_hpc.comm.topology import BroadcastTree, build_tree

NAMES = [f"node{i}" for i in range(6000)]


def _layers(parents: np.ndarray) -> np.ndarray:
    """Layer of every node (0 for the root), by following parent pointers; -1 where unreachable."""
    layers = np.full(len(parents), -1, dtype=np.int64)
    layers[0] = 0
    for _ in range(len(parents)):
        todo = (layers < 0) & (parents >= 0)
        todo[todo] = layers[parents[todo]] >= 0
        if not todo.any():
            break
        layers[todo] = layers[parents[todo]] + 1
    return layers


def test_every_node_count_up_to_6000_gives_a_shallow_balanced_tree():
    for n in range(1, 6001):
        tree = build_tree(NAMES[:n])
        parents = np.asarray(tree.parents)
        bound = math.ceil(math.sqrt(n))
        assert tree.fanout == bound
        assert parents[0] == -1 and tree.root == "node0"
        # parents precede children, so every node has a parent that was already reached
        assert np.all(parents[1:] < np.arange(1, n)) and np.all(parents[1:] >= 0), n
        layers = _layers(parents)
        assert layers.min() >= 0, f"n={n}: a node is unreachable"
        assert layers.max() + 1 <= 3, f"n={n}: {layers.max() + 1} layers"
        # each node has exactly one parent, so it is reached exactly once
        assert np.bincount(parents[1:], minlength=n).sum() == n - 1
        if n > 1:
            assert np.bincount(parents[1:], minlength=n).max() <= bound, n


def test_lookups_agree_with_the_parent_array():
    tree = build_tree(NAMES[:10])
    assert tree.depth == 3
    assert tree.children_of("node0") == ("node1", "node2", "node3", "node4")
    assert tree.relays == ("node1", "node2", "node3", "node4")
    assert tree.children_of("node1") == ("node5", "node9")
    assert tree.parent_of("node9") == "node1" and tree.parent_of("node0") is None
    assert tree.layer_of("node7") == 2 and tree.layer_of("node3") == 1
    assert build_tree(["solo"]).depth == 1 and build_tree(["solo"]).relays == ()
    assert build_tree(NAMES[:3]).depth == 2
    with pytest.raises(KeyError, match="unknown node 'nope'"):
        tree.parent_of("nope")


def test_round_trip_through_json():
    tree = build_tree(NAMES[:37])
    again = BroadcastTree.from_dict(json.loads(json.dumps(tree.to_dict())))
    assert again == tree
    with pytest.raises(ValueError, match="missing field 'parents'"):
        BroadcastTree.from_dict({"nodes": ["a"], "fanout": 1})


def test_bad_shapes_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="cannot reach 20 nodes"):
        build_tree(NAMES[:20], fanout=3)
    with pytest.raises(ValueError, match="unique"):
        build_tree(["a", "b", "a"])
    with pytest.raises(ValueError, match="at least one node"):
        build_tree([])
    with pytest.raises(ValueError, match="earlier node"):
        BroadcastTree(("a", "b", "c"), (-1, 2, 0), 2)


@pytest.mark.parametrize("n", [2, 5, 10, 17, 100, 1000])
def test_reattach_keeps_every_live_node_reachable(n):
    tree = build_tree(NAMES[:n])
    for dead in list(tree.relays) + [tree.nodes[-1]]:
        repaired = tree.reattach(dead)
        assert dead not in repaired.nodes
        assert set(repaired.nodes) == set(tree.nodes) - {dead}
        layers = _layers(np.asarray(repaired.parents))
        assert layers.min() >= 0 and layers.max() + 1 <= 3
        for child in tree.children_of(dead):
            assert repaired.parent_of(child) == tree.parent_of(dead)
        # nodes that were not below the dead one keep their parent
        for node in repaired.nodes[1:]:
            if tree.parent_of(node) != dead:
                assert repaired.parent_of(node) == tree.parent_of(node)
    # relays die one after another: the learner ends up feeding everyone directly
    for relay in tree.relays:
        tree = tree.reattach(relay)
    assert all(tree.parent_of(node) == "node0" for node in tree.nodes[1:])
    with pytest.raises(ValueError, match="learner's node"):
        tree.reattach("node0")
