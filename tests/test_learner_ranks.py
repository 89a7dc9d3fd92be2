"""Several learner ranks of one policy in the distributed runtime, with real Ray actors, real
torch.distributed (gloo) processes and real ZeroMQ sockets: the actors' shards, the runtime's
collectives around each update, a run with two ranks that learns CartPole, and a rank killed
mid-run (one line, a checkpoint, a resume with another number of ranks)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch.multiprocessing as mp

ray = pytest.importorskip("ray")

from lockstep_ranks import lockstep_rank  # noqa: E402

from lamarckian_hpc.comm.topology import build_tree  # noqa: E402
from lamarckian_hpc.runtime.learner.checkpoint import checkpoint_path, load_checkpoint  # noqa: E402
from lamarckian_hpc.runtime.learner.group import free_port  # noqa: E402
from lamarckian_hpc.runtime.placement.shards import plan_flat, plan_tree  # noqa: E402
from lamarckian_hpc.storage import open_run  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CARTPOLE = ROOT / "configs" / "ppo_cartpole.yaml"


def test_flat_shards_are_even_blocks_and_their_shares_make_the_batch():
    plan = plan_flat(num_actors=7, world_size=3)
    assert plan.actor_ranks == (0, 0, 0, 1, 1, 2, 2)
    assert [plan.actors_of(rank) for rank in range(3)] == [[0, 1, 2], [3, 4], [5, 6]]
    shares = [plan.share(700, rank) for rank in range(3)]
    assert shares == [300, 200, 200] and sum(shares) >= 700
    assert [plan.credit_budget(7, rank) for rank in range(3)] == [3, 2, 2]
    # More ranks than actors: the rank without actors gathers nothing, and says so with a zero share.
    starved = plan_flat(num_actors=1, world_size=2)
    assert starved.actors_of(1) == [] and starved.share(512, 1) == 0


def test_tree_shards_are_whole_subtrees_balanced_over_the_ranks():
    names = tuple(f"n{i}" for i in range(9))
    tree = build_tree(names)
    actor_nodes = tuple(node for node in range(9) for _ in range(4))  # 4 actors a node
    plan = plan_tree(tree, names, actor_nodes, world_size=3)
    assert plan.node_ranks[0] == 0  # rank 0 keeps its own node's actors
    for name in names[1:]:  # a node's relay sends to the rank of its whole subtree
        parent = tree.parent_of(name)
        if parent != tree.root:
            assert plan.node_ranks[names.index(name)] == plan.node_ranks[names.index(parent)]
    counts = [len(plan.actors_of(rank)) for rank in range(3)]
    assert sum(counts) == 36 and min(counts) > 0 and max(counts) - min(counts) <= 12
    assert all(plan.actor_ranks[i] == plan.node_ranks[actor_nodes[i]] for i in range(36))


def test_a_leaf_leaves_its_subtree_for_a_rank_that_would_starve():
    """4 nodes make a tree of two subtrees under the root ({n1, n3} and {n2}): as whole subtrees, 4
    ranks would hold 2, 0, 2 and 4 actors. The leaf n3 goes to the rank that has none, so each
    holds one node's actors; 2 ranks keep whole subtrees (4 actors each)."""
    names = ("n0", "n1", "n2", "n3")
    tree = build_tree(names)
    assert tree.parent_of("n3") == "n1" and tree.children_of(tree.root) == ("n1", "n2")
    actor_nodes = tuple(node for node in range(4) for _ in range(2))
    four = plan_tree(tree, names, actor_nodes, world_size=4)
    assert [len(four.actors_of(rank)) for rank in range(4)] == [2, 2, 2, 2]
    assert four.node_ranks[0] == 0 and four.node_ranks[3] != four.node_ranks[1]
    two = plan_tree(tree, names, actor_nodes, world_size=2)
    assert [len(two.actors_of(rank)) for rank in range(2)] == [4, 4]
    assert two.node_ranks[3] == two.node_ranks[1]  # no rank would starve: the subtree stays whole
    # A move only where it narrows the gap by more than it opens: with 3 ranks the holdings 2, 2, 4
    # stay (moving n3's 2 actors would give 2, 4, 2).
    three = plan_tree(tree, names, actor_nodes, world_size=3)
    assert sorted(len(three.actors_of(rank)) for rank in range(3)) == [2, 2, 4]
    assert three.node_ranks[3] == three.node_ranks[1]


def test_a_rank_takes_the_shard_of_the_node_it_runs_on():
    """Ranks 1.. are interchangeable in a plan: told where each runs (`spread`: rank r on node r),
    each takes the shard holding its node, so that node's experience stays on its host; the
    holdings are those of the plan without it."""
    names = tuple(f"n{i}" for i in range(9))
    tree = build_tree(names)
    actor_nodes = tuple(node for node in range(9) for _ in range(4))
    for world_size in (2, 3, 4, 9):
        placed = plan_tree(tree, names, actor_nodes, world_size, rank_nodes=list(range(world_size)))
        unplaced = plan_tree(tree, names, actor_nodes, world_size)
        assert all(placed.node_ranks[rank] == rank for rank in range(world_size))
        assert (sorted(len(placed.actors_of(rank)) for rank in range(world_size))
                == sorted(len(unplaced.actors_of(rank)) for rank in range(world_size)))
        assert len(placed.actors_of(0)) == len(unplaced.actors_of(0))  # rank 0's shard stays rank 0's
    four = plan_tree(build_tree(names[:4]), names[:4], actor_nodes[:16], 4, rank_nodes=[0, 1, 2, 3])
    assert four.node_ranks == (0, 1, 2, 3)
    # `pack`: every rank on rank 0's node, nothing to prefer; more ranks than nodes: round the nodes.
    packed = plan_tree(tree, names, actor_nodes, 3, rank_nodes=[0, 0, 0])
    assert packed.node_ranks == plan_tree(tree, names, actor_nodes, 3).node_ranks
    assert plan_tree(build_tree(names[:2]), names[:2], (0, 1), 4, rank_nodes=[0, 1, 0, 1]).node_ranks == (0, 1)


def test_ranks_agree_on_what_they_hold_and_rank_0s_metrics_are_global():
    context = mp.get_context("spawn")
    results = context.Queue()
    port = free_port("127.0.0.1")
    processes = [context.Process(target=lockstep_rank, args=(rank, port, results)) for rank in range(2)]
    for process in processes:
        process.start()
    got = sorted(results.get(timeout=60) for _ in processes)
    for process in processes:
        process.join(timeout=30)
    for _rank, agreement, counters, returns, lengths, stop in got:
        assert agreement.steps == (512, 0) and agreement.total_steps == 512 and agreement.env_frames == 900
        assert not agreement.stop
        assert counters["dropped_stale_steps"] == 1 and counters["lost_messages"] == 2
        assert returns == [10.0, 11.0, 30.0] and lengths == [10, 11, 30]  # in rank order, on every rank
        assert stop  # rank 0 asked to stop: every rank hears it in the same collective


def _train_cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "lamarckian_hpc", "train", *args]


@pytest.mark.slow
@pytest.mark.second_pass
@pytest.mark.parametrize("layout", [
    pytest.param(["runtime.num_actors=2"], id="flat"),
    pytest.param(["runtime.num_actors=3", "runtime.simulated_nodes=3", "runtime.broadcast=tree"], id="tree"),
])
def test_two_learner_ranks_learn_cartpole(tmp_path, layout):
    """PPO with 2 ranks, each on its shard (flat: an actor each; tree: rank 1 takes a relay's
    subtree), reaches the config's 475 as one learner of 512 steps does."""
    run = tmp_path / "two.h5"
    done = subprocess.run(_train_cli(str(CARTPOLE), f"storage.directory={tmp_path}", "storage.run_name=two",
                                     *layout, "runtime.learners=2", "stop.total_env_steps=200000"),
                          capture_output=True, text=True, timeout=600, cwd=ROOT, env=_env())
    assert done.returncode == 0, done.stderr[-2000:]
    with open_run(run) as reader:
        returns = reader.metric("episode_return_mean")
        assert returns.value[-1] >= 475, returns.value[-5:]
        actors = int(layout[0].split("=")[1])
        assert reader.metric("actors_connected").value[-1] == actors  # every shard, summed over the ranks
        assert np.nanmax(reader.metric("learner_collective_ms").value) > 0
        assert reader.metric("trained_frames_per_second").value[-1] > 0
        staleness = reader.metric("staleness_mean").value
        assert np.nanmean(staleness) <= 2.0


@pytest.mark.slow
@pytest.mark.second_pass
def test_four_ranks_on_a_four_node_tree_each_take_a_node(tmp_path):
    """4 simulated nodes, one actor each, 4 ranks: the leaf n3 (under n1's relay) belongs to
    another rank than its parent, and its relay sends straight to that rank. Were its experience
    still going up through n1, that rank would be starved at every update and wait the bounded
    quarter of runtime.learner_timeout_seconds (150 s here) before each one."""
    done = subprocess.run(_train_cli(str(CARTPOLE), f"storage.directory={tmp_path}", "storage.run_name=four",
                                     "runtime.num_actors=4", "runtime.simulated_nodes=4", "runtime.broadcast=tree",
                                     "runtime.learners=4", "runtime.learner_timeout_seconds=600",
                                     "stop.target_return=null", "stop.total_env_steps=6144"),
                          capture_output=True, text=True, timeout=420, cwd=ROOT, env=_env())
    assert done.returncode == 0, done.stderr[-2000:]
    with open_run(tmp_path / "four.h5") as reader:
        assert reader.meta["actors_per_learner_rank"] == [1, 1, 1, 1]
        assert reader.meta["broadcast_tree"]["parents"] == [-1, 0, 0, 1]
        assert reader.metric("actors_connected").value[-1] == 4
        waits = reader.metric("learner_agree_ms").value
        assert len(waits) >= 4 and np.max(waits[1:]) < 75_000, waits  # no update waited for a starved rank
    shown = subprocess.run([sys.executable, "-m", "lamarckian_hpc", "inspect", str(tmp_path / "four.h5")],
                           capture_output=True, text=True, timeout=120, cwd=ROOT, env=_env()).stdout
    assert "4 learner ranks, actors each: rank 0 1, rank 1 1, rank 2 1, rank 3 1" in shown


def _env() -> dict[str, str]:
    """The child's environment: this checkout's package for it and for its Ray workers."""
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _learner_rank_processes() -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info.get("cmdline") or []
        if cmdline and cmdline[0].startswith("ray::LearnerRank"):
            found.append(process)
    return found


@pytest.mark.slow
@pytest.mark.second_pass
def test_a_killed_learner_rank_stops_the_run_with_a_checkpoint_and_it_resumes_on_another_count(tmp_path):
    run = tmp_path / "killed.h5"
    base = ["runtime.num_actors=2", "stop.target_return=null", "storage.checkpoint_interval_seconds=1",
            "runtime.learner_timeout_seconds=20"]
    before = {process.pid for process in _learner_rank_processes()}
    child = subprocess.Popen(_train_cli(str(CARTPOLE), f"storage.directory={tmp_path}", "storage.run_name=killed", "runtime.learners=2",
                                        "stop.total_env_steps=10000000", *base),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=_env())
    killed: list[int] = []

    def kill_rank_1() -> None:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and child.poll() is None:
            ckpt = checkpoint_path(run)
            ranks = [p for p in _learner_rank_processes() if p.pid not in before]
            if ranks and ckpt.is_file() and load_checkpoint(ckpt).policy_version >= 5:
                os.kill(ranks[0].pid, signal.SIGKILL)  # a real process kill, mid-run
                killed.append(ranks[0].pid)
                return
            time.sleep(0.2)

    killer = threading.Thread(target=kill_rank_1)
    killer.start()
    started = time.monotonic()
    try:
        _, stderr = child.communicate(timeout=300)
    finally:
        if child.poll() is None:
            child.kill()
        killer.join()
    assert killed, f"rank 1 never ran: {stderr[-2000:]}"
    lines = [line for line in stderr.splitlines() if "learner rank 1" in line]
    assert child.returncode != 0 and len(lines) == 1, stderr[-3000:]
    assert "died" in lines[0] and os.uname().nodename in lines[0], lines[0]  # the rank and its node
    assert time.monotonic() - started < 240
    saved = load_checkpoint(checkpoint_path(run))
    assert saved.policy_version >= 5
    with open_run(run) as reader:
        assert not reader.closed_cleanly
    # The learner state does not depend on the number of ranks: resume on three (every rank loads
    # rank 0's checkpointed state; ranks that disagreed would fail the update's checks).
    resumed = subprocess.run(_train_cli("--resume", str(run), "runtime.learners=3", "runtime.num_actors=3",
                                        f"stop.total_env_steps={saved.env_frames + 2048}"),
                             capture_output=True, text=True, timeout=300, cwd=ROOT, env=_env())
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    final = load_checkpoint(checkpoint_path(run))
    assert final.policy_version > saved.policy_version and final.env_frames >= saved.env_frames + 2048
    with open_run(run) as reader:
        assert reader.closed_cleanly
        versions = reader.metric("learning_rate").policy_version
        assert len(np.unique(versions)) == len(versions)  # every version once, across the kill
