"""A PBT population's Ray pool grows onto a node that joins the run and gives it up when it
leaves, with no member lost: on one machine, the run's own Ray is the cluster, and a second real
Ray node joins it through the run's join folder as an actor job's node does
(`cluster.actor_job.join_run`, in a thread of the test). The Slurm form (an actor job of two nodes
beside a learner job of two) is in tests/test_actor_jobs.py."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from local_ray import joining_node, local_ray  # noqa: E402
from test_pbt import TINY  # noqa: E402

from lamarckian_hpc.cluster.discovery import ADDRESS_ENV  # noqa: E402
from lamarckian_hpc.config import load_config  # noqa: E402
from lamarckian_hpc.config.pbt import PBTConfig  # noqa: E402
from lamarckian_hpc.storage.join_folder import JOINED_NODE_RESOURCE, JoinFolder  # noqa: E402


def _joined_nodes() -> int:
    import ray

    return sum(1 for node in ray.nodes() if node.get("Alive") and node["Resources"].get(JOINED_NODE_RESOURCE))


class GrowThenLeave:
    """After each generation: the pool's workers and every member's state; after the first, starts
    the node's join and waits until it is up; tells it to leave once the pool trained a generation on it."""

    def __init__(self, pool, joiner: threading.Thread, leave: threading.Event, folder: JoinFolder) -> None:
        from lamarckian_hpc.population.workflow import member_states

        self.pool, self.joiner, self.leave, self.folder = pool, joiner, leave, folder
        self.member_states = member_states
        self.workers: list[tuple[int, int]] = []  # (workers, workers on the joined node) per generation
        self.states: list[list[dict]] = []

    def on_generation_end(self, report) -> None:
        joined = sum(1 for placement in self.pool.placements if placement is not None and not placement[1])
        self.workers.append((self.pool.num_workers, joined))
        self.states.append(self.member_states(self.pool, 4))
        if report.generation == 0:  # the next generation starts on the grown pool
            self.joiner.start()
            deadline = time.monotonic() + 90
            while _joined_nodes() == 0 and time.monotonic() < deadline:
                time.sleep(0.2)
        elif joined and not self.leave.is_set():
            self.leave.set()
            deadline = time.monotonic() + 30
            while not self.folder.leaving() and time.monotonic() < deadline:
                time.sleep(0.1)


@pytest.mark.second_pass  # a second Ray node and four PPO workers on two cores: about 60 s
def test_a_pbt_pool_grows_onto_a_joined_node_and_gives_it_up_with_no_member_lost(tmp_path, monkeypatch):
    from lamarckian_hpc.evorl.pbt_ppo import PBTProgram
    from lamarckian_hpc.population.worker_pool import make_pool
    from lamarckian_hpc.population.workflow import PopulationRuntime, run_population

    monkeypatch.setenv(ADDRESS_ENV, "127.0.0.1")  # both Ray nodes of this machine on loopback
    folder = JoinFolder(tmp_path / "run.join")
    leave = threading.Event()
    config = load_config("configs/pbt_ppo_cartpole.yaml",
                         TINY + ["runtime.mode=ray", "runtime.num_workers=2", f"runtime.join_folder={folder.path}",
                                 "algorithm.population_size=4", "stop.total_env_frames=2560"], PBTConfig)
    lines: list[str] = []
    with local_ray(num_cpus=2):
        joiner, outcome = joining_node(folder, tmp_path, leave, leave_seconds=120)
        program = PBTProgram(config)
        pool = make_pool("ray", program.host_factory(), 4, 2, config.runtime.timeout_seconds)
        watcher = GrowThenLeave(pool, joiner, leave, folder)
        try:
            run_population(program, PopulationRuntime.of(config.runtime), report=lines.append, pool=pool,
                           observers=[watcher])
        finally:
            pool.close()
            leave.set()
            if joiner.is_alive():
                joiner.join(timeout=60)
    counts = [workers for workers, _ in watcher.workers]
    assert counts[0] == 2 and 4 in counts and counts[-1] == 2, (counts, lines)
    assert max(on_node for _, on_node in watcher.workers) == 2  # one worker per CPU of the joined node
    assert any(line.startswith("pool: 4 workers") and "joined: " in line for line in lines), lines
    assert any(line.startswith("pool: 2 workers") and "left: " in line for line in lines), lines
    assert outcome.get("ended") == "left" and folder.was_let_go(outcome["node"]), outcome
    # No member lost: every member trained every interval, each continuing from its last state
    # (its frames and policy version grew across each move), and none was lost on the way.
    assert program.interval == 5 and all(frames >= 2560 for frames in program.member_frames)
    for before, after in zip(watcher.states, watcher.states[1:]):
        for slot in range(4):
            assert after[slot]["env_frames"] > before[slot]["env_frames"]
            assert after[slot]["version"] > before[slot]["version"]
    assert not any("was lost" in line for line in lines), lines
