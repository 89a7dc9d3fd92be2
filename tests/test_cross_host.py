"""Runs across hosts that share nothing but a network and a file system: the test cluster's
nodes, each in its own network namespace with its own loopback (slurm/testcluster). A socket bound
on loopback on one node cannot be reached from another, so an address leak fails here instead of
on a user's first cluster.

The issue's setting, without Slurm: a Ray head with no CPUs on node1, a Ray worker on node2, and
`train` on node1 joining that cluster; every actor therefore runs on node2.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from optional_parts import on_host, separate_hosts

from lamarckian_hpc.storage import open_run

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "ppo_cartpole.yaml"
RAY = str(Path(sys.executable).with_name("ray"))
HEAD_PORT = 46379


def _wait_for_port(address: str, port: int, timeout_seconds: float, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"ray exited {process.returncode}:\n{process.stdout.read()}")
        try:
            with socket.create_connection((address, port), timeout=1):
                return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"nothing listens on {address}:{port} after {timeout_seconds} s")


@pytest.fixture
def ray_on_two_hosts():
    """A Ray head with no CPUs on node1 and a worker with 2 CPUs on node2; the env that joins them."""
    first, second = separate_hosts(2)
    temp = tempfile.mkdtemp(dir="/tmp", prefix="lhx-")  # short: Ray's socket paths sit below
    env = {key: value for key, value in os.environ.items() if not key.startswith("RAY_")}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32), RAY_USAGE_STATS_ENABLED="0")
    common = ["start", "--block", "--disable-usage-stats"]
    processes = [subprocess.Popen(on_host(1, [RAY, *common, "--head", f"--node-ip-address={first}",
                                              f"--port={HEAD_PORT}", "--num-cpus=0", "--include-dashboard=false",
                                              f"--temp-dir={temp}/1"]),
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)]
    try:
        _wait_for_port(first, HEAD_PORT, 90, processes[0])
        worker = subprocess.Popen(on_host(2, [RAY, *common, f"--address={first}:{HEAD_PORT}",
                                              f"--node-ip-address={second}", "--num-cpus=2",
                                              f"--temp-dir={temp}/2"]),
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        processes.append(worker)
        deadline = time.monotonic() + 90
        for line in worker.stdout:  # `ray start --block` says so once the node has joined
            if "Ray runtime started" in line or time.monotonic() > deadline:
                break
        yield f"{first}:{HEAD_PORT}", env
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
        shutil.rmtree(temp, ignore_errors=True)


def _train_on_node1(env: dict[str, str], tmp_path: Path, overrides: list[str], timeout_seconds: float):
    command = [sys.executable, "-m", "lamarckian_hpc", "train", str(CONFIG), *overrides,
               "stop.total_env_steps=100000000", "stop.target_return=null", "runtime.num_actors=2",
               f"storage.directory={tmp_path / 'runs'}", "storage.run_name=run"]
    started = time.monotonic()
    done = subprocess.run(on_host(1, command), env=env, capture_output=True, text=True, timeout=timeout_seconds)
    return done, time.monotonic() - started, tmp_path / "runs" / "run.h5"


def test_actors_on_another_host_reach_the_learner_and_train(ray_on_two_hosts, tmp_path):
    address, env = ray_on_two_hosts
    done, seconds, run_path = _train_on_node1(env, tmp_path, [f"runtime.ray_address={address}",
                                                             "stop.max_wall_seconds=30"], 300)
    assert done.returncode == 0, done.stderr[-3000:]
    with open_run(run_path) as run:
        meta, summary = run.meta, run.summary()
        returns = run.metric("episode_return_mean")
        hosts_connected = run.metric("hosts_connected").value
    assert summary.closed_cleanly
    assert meta["actors_per_node"] == {"node2": 2}    # every actor placed on the other host
    assert hosts_connected.max() == 1                   # and each said hello from there, none from node1
    assert len(returns.value) > 0 and summary.env_frames > 0     # and its experience reached the learner
    assert "2 actors on 1 node(s): node2 2; flat layout" in subprocess.run(
        [sys.executable, "-m", "lamarckian_hpc", "inspect", str(run_path)], capture_output=True, text=True,
        timeout=120).stdout


def test_actors_given_an_address_they_cannot_reach_end_the_run_with_one_line(ray_on_two_hosts, tmp_path):
    """The learner binds loopback (as it once did by default): node2's actors dial their own loopback."""
    address, env = ray_on_two_hosts
    done, seconds, run_path = _train_on_node1(
        env, tmp_path, [f"runtime.ray_address={address}", "runtime.bind_address=127.0.0.1",
                        "runtime.connect_timeout_seconds=20", "stop.max_wall_seconds=600"], 240)
    assert done.returncode == 1, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr[-3000:]
    line = errors[0]
    assert "2 of 2 actors never connected" in line and "runtime.connect_timeout_seconds=20" in line, line
    assert "actor 0 on node2" in line and "actor 1 on node2" in line, line
    assert "tcp://127.0.0.1:" in line, line
    assert seconds < 20 + 90, f"took {seconds:.0f} s"  # Ray's start-up, then the deadline
    with open_run(run_path) as run:
        assert not run.summary().closed_cleanly


# ---- every workload launched on the 4-host test cluster through Slurm ----

from test_slurm import Launch  # noqa: E402

#: A PBT+PPO run small enough for a test: 4 members, intervals of 512 frames.
PBT_TINY = ["algorithm.population_size=4", "env.num_envs=4", "ppo.num_epochs=2", "model.policy_hidden_sizes=[16]",
            "algorithm.interval_env_frames=512", "stop.target_return=null"]


@pytest.mark.parametrize("broadcast", ["flat", "tree"])
def test_ppo_launched_across_four_hosts_reaches_475_with_experience_from_every_host(tmp_path, broadcast):
    separate_hosts(4)
    launch = Launch(tmp_path, [f"runtime.broadcast={broadcast}"],
                    ["--nodes", "4", "--cpus-per-node", "2", "--time", "15", "--object-store-mb", "100"],
                    base=["stop.target_return=475", "stop.total_env_steps=400000", "stop.max_wall_seconds=600"])
    assert launch.finish(900) == 0, "".join(launch.output)
    with open_run(launch.run_path) as run:
        meta, summary = run.meta, run.summary()
        returns = run.metric("episode_return_mean")
        hosts_connected = run.metric("hosts_connected").value
    assert summary.closed_cleanly and meta["broadcast_layout"] == broadcast
    assert sorted(meta["actors_per_node"]) == ["node1", "node2", "node3", "node4"], meta
    assert sum(meta["actors_per_node"].values()) == 7   # every CPU but the learner's
    assert hosts_connected.max() == 4                   # hellos from every host reached the learner
    assert returns.value.max() >= 475


def test_pbt_launched_on_two_hosts_trains_members_on_both(tmp_path):
    separate_hosts(2)
    launch = Launch(tmp_path, [], ["--nodes", "2", "--cpus-per-node", "2", "--time", "15"],
                    config=ROOT / "configs" / "pbt_ppo_cartpole.yaml",
                    base=[*PBT_TINY, "stop.total_env_frames=1536"])
    assert launch.finish(600) == 0, "".join(launch.output)
    assert "evolve ran on 2 Ray nodes" in "".join(launch.output)
    with open_run(launch.run_path) as run:
        population = run.population()
    hosts = set(population["host"])  # the job's two nodes, whichever Slurm picked
    assert len(hosts) == 2 and hosts <= {"node1", "node2", "node3", "node4"}, hosts


def test_nsga2_launched_on_two_hosts_evaluates_on_both(tmp_path):
    separate_hosts(2)
    launch = Launch(tmp_path, [], ["--nodes", "2", "--cpus-per-node", "2", "--time", "15"],
                    config=ROOT / "configs" / "nsga2_zdt1.yaml",
                    base=["algorithm.population_size=16", "algorithm.generations=3",
                          "problem.evaluation_delay_seconds=0.05"])
    assert launch.finish(600) == 0, "".join(launch.output)
    with open_run(launch.run_path) as run:
        population = run.population()
    assert len(population["id"]) == 16 * 3
    hosts = set(population["host"])  # the job's two nodes, whichever Slurm picked
    assert len(hosts) == 2 and hosts <= {"node1", "node2", "node3", "node4"}, hosts


def test_a_league_launched_on_two_hosts_records_every_match(tmp_path):
    """`launch configs/league_pong.yaml`: the league's learners run as Ray actors of the job's
    two-node cluster, every match lands in /league, and the run file closes cleanly."""
    from lamarckian_hpc.league.store import read_league

    separate_hosts(2)
    launch = Launch(tmp_path, [], ["--nodes", "2", "--cpus-per-node", "2", "--time", "15"],
                    config=ROOT / "configs" / "league_pong.yaml",
                    base=["algorithm.generations=3", "env.num_envs=4", "ppo.batch_size=256", "ppo.num_epochs=1",
                          "model.policy_hidden_sizes=[16]", "algorithm.scripted_evaluation_interval=0"])
    assert launch.finish(600) == 0, "".join(launch.output)
    assert "evolve ran on 2 Ray nodes" in "".join(launch.output)
    with open_run(launch.run_path) as run:
        assert run.summary().closed_cleanly
        assert len(run.metric("elo_main_0")) == 3
    league = read_league(launch.run_path)
    assert len(league.matches["learner"]) == 3 * 3 and league.names[:3] == ["main_0", "main_exploiter_0",
                                                                            "league_exploiter_0"]


def test_pbt_launched_is_requeued_at_its_time_limit_and_resumes_after_its_last_interval(tmp_path):
    """The same requeue as training's (tests/test_slurm.py): Slurm's time-limit warning, the job
    back in the queue, and the evolve run continued from its file, no interval recorded twice."""
    separate_hosts(2)
    from test_slurm import _wait_until

    launch = Launch(tmp_path, [], ["--nodes", "2", "--cpus-per-node", "2", "--time", "15"],
                    config=ROOT / "configs" / "pbt_ppo_cartpole.yaml",
                    base=[*PBT_TINY, "stop.total_env_frames=8192"])

    def intervals() -> int:
        try:
            with open_run(launch.run_path) as run:
                return len(set(run.population().get("generation", ())))
        except (OSError, KeyError, ValueError):
            return 0

    _wait_until(lambda: intervals() >= 1, 300, "the first interval in the run file")
    launch.requeue_at_time_limit()
    assert launch.finish(600) == 0, "".join(launch.output)
    assert "evolve resumed on 2 Ray nodes, requeued 1 times" in "".join(launch.output)
    with open_run(launch.run_path) as run:
        population = run.population()
        closed = run.summary().closed_cleanly
    assert closed
    generations = population["generation"]
    assert sorted(set(generations)) == list(range(8192 // 512))        # every interval, once
    assert all(list(generations).count(g) == 4 for g in set(generations))
