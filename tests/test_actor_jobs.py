"""A run as a learner job and actor jobs on the real Slurm test cluster (slurm/testcluster): the
learner job in the `learner` partition (node1, which declares a GPU in GRES), actor jobs in the
`cpu` partition (node2..node4), each simulated node in its own network namespace. Actor jobs join
while the learner trains, leave by scancel or die with their node, and outlive a requeue of the
learner job."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "slurm" / "testcluster"))  # testcluster_nodes

from optional_parts import require_slurm  # noqa: E402
from test_slurm import Launch, _wait_until  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LEARNER = ["--partition", os.environ.get("TESTCLUSTER_LEARNER_PARTITION", "learner"), "--nodes", "1",
           "--cpus-per-node", "2", "--gpus-per-node", "1", "--time", "10", "--object-store-mb", "100"]
CPU_PARTITION = os.environ.get("TESTCLUSTER_CPU_PARTITION", "cpu")
ACTOR_JOB = ["--nodes", "1", "--cpus-per-node", "2", "--time", "10", "--object-store-mb", "100"]
#: The learner node samples with one actor; the rest comes from the actor jobs.
METRICS = ["runtime.num_actors=1", "storage.metrics_interval_seconds=1", "storage.trajectories.every_episodes=4"]


def _metrics(run_path: Path, *names: str) -> dict[str, np.ndarray]:
    """The named metrics' values as the run file holds them now (empty before it has any)."""
    from lamarckian_hpc.storage import open_run

    try:
        with open_run(run_path) as run:
            return {name: np.asarray(run.metric(name).value) for name in names}
    except (OSError, KeyError, ValueError):
        return {name: np.zeros(0) for name in names}


def _hosts_now(run_path: Path) -> int:
    hosts = _metrics(run_path, "hosts_connected")["hosts_connected"]
    return int(hosts[-1]) if len(hosts) else 0


def _join(tmp_path: Path, run_path: Path) -> str:
    """`lamarckian-hpc join` as a user types it; the actor job's id."""
    done = subprocess.run([sys.executable, "-m", "lamarckian_hpc", "join", str(run_path), "--partition", CPU_PARTITION,
                           *ACTOR_JOB, "--folder", str(tmp_path / "jobs")],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.split("submitted actor job ")[1].split(":")[0]


def _recorded_hosts(run_path: Path) -> set[str]:
    """Hosts whose actors' episodes the run recorded: experience from there reached the learner."""
    import h5py

    with h5py.File(run_path, "r", swmr=True) as run:
        hosts = run["trajectories/main/episodes/host"][()]
    return {host.decode() if isinstance(host, bytes) else str(host) for host in hosts}


def test_a_learner_job_and_two_actor_jobs_in_another_partition_train_cartpole(tmp_path):
    require_slurm(3)
    from lamarckian_hpc.storage import open_run

    # A smaller step than the config's, so that learning lasts past the actor jobs' joining.
    launch = Launch(tmp_path, [*METRICS, "algorithm.learning_rate=0.0002", "stop.total_env_steps=2000000",
                               "stop.max_wall_seconds=420"],
                    [*LEARNER, "--actor-jobs", "2", "--actor-partition", CPU_PARTITION,
                     *[f"--actor-{flag[2:]}" if flag.startswith("--") else flag for flag in ACTOR_JOB]],
                    base=["storage.checkpoint_interval_seconds=30"])
    try:
        actor_jobs = [launch.wait_for(r"submitted actor job (\d+)", 60).group(1) for _ in range(2)]
        assert launch.finish(480) == 0, "".join(launch.output)
    finally:
        subprocess.run(["scancel", launch.job_id, *actor_jobs], timeout=30)
    text = "".join(launch.output)
    assert "in learner" in text and f"in {CPU_PARTITION}" in text, text
    with open_run(launch.run_path) as run:
        returns = run.metric("episode_return_mean").value
        hosts = run.metric("hosts_connected").value
        joined = run.metric("joined_actors").value
        meta = run.meta
    assert returns[-1] >= 475, f"stopped at a mean return of {returns[-1]}"
    assert list(meta["hosts"]) == ["node1"]  # the learner job's own node
    assert hosts.max() == 3 and joined.max() == 4  # node1, and the two actor jobs' nodes with 2 actors each
    recorded = _recorded_hosts(launch.run_path)
    assert {"node1"} < recorded and len(recorded - {"node1"}) == 2, recorded  # both actor jobs' experience
    for job_id in actor_jobs:  # the run's end let them go: each ended by itself once the run finished
        log = next((tmp_path / "jobs" / job_id).glob("*_0_log.out")).read_text()
        assert "joined the run" in log, log


def test_actor_jobs_join_a_running_run_and_leave_by_scancel_and_by_a_killed_node(tmp_path):
    require_slurm(4)
    from testcluster_nodes import kill_node, remove_job_leftovers, restore_node

    from lamarckian_hpc.storage import open_run
    from lamarckian_hpc.storage.join_folder import JoinFolder, join_folder_of

    # Synchronous sampling: every batch is of the current version, and completes from the actors there are.
    launch = Launch(tmp_path, [*METRICS, "runtime.sampling=sync", "runtime.sync_fill_seconds=10",
                               "stop.target_return=null", "stop.total_env_steps=100000000",
                               "stop.max_wall_seconds=150"], LEARNER,
                    base=["storage.checkpoint_interval_seconds=30", "algorithm.batch_size=1024"])
    jobs: list[str] = []
    killed_node = "node3"
    try:
        launch.wait_for(rf"job {launch.job_id}: .*policy version", 180)
        jobs = [_join(tmp_path, launch.run_path), _join(tmp_path, launch.run_path)]
        _wait_until(lambda: _hosts_now(launch.run_path) == 3, 150, "both actor jobs' nodes in the run")
        joined_at = time.monotonic()
        time.sleep(10)
        folder = JoinFolder(join_folder_of(launch.run_path))
        node_of = {job: subprocess.run(["squeue", "-h", "-j", job, "-o", "%N"], capture_output=True, text=True,
                                       timeout=30).stdout.strip() for job in jobs}
        clean, killed = (jobs if node_of[jobs[1]] == killed_node else jobs[::-1])
        assert node_of[killed] == killed_node, node_of
        subprocess.run(["scancel", clean], check=True, timeout=30)
        scancelled = time.monotonic()
        _wait_until(lambda: any(folder.left()), 30, "the learner to let the cancelled job's node go")
        let_go_after = time.monotonic() - scancelled
        _wait_until(lambda: _hosts_now(launch.run_path) == 2, 30, "the cancelled job's node to leave")
        kill_node(killed_node, killed)
        _wait_until(lambda: _hosts_now(launch.run_path) == 1, 90, "the killed node to count as lost")
        assert launch.finish(240) == 0, "".join(launch.output)
    finally:
        subprocess.run(["scancel", launch.job_id, *jobs], timeout=30)
        restore_node(killed_node)
        for job in jobs:
            remove_job_leftovers(job)
    assert let_go_after < 10, f"the cancelled node was let go {let_go_after:.1f} s after scancel"
    assert time.monotonic() - joined_at > 0
    with open_run(launch.run_path) as run:
        series = run.metrics()
        meta = run.meta
        summary = run.summary()
    assert summary.closed_cleanly
    assert series["hosts_connected"].value.max() == 3
    assert series["lost_messages"].value.max() == 0  # no message lost, at the leave or at the kill
    assert series["credits_in_flight"].value.max() <= meta["credit_budget"]
    assert np.all(np.diff(series["learning_rate"].policy_version) > 0)  # nothing counted twice
    # The run went on after both: updates with the learner's node alone at the end.
    end = series["hosts_connected"]
    assert end.value[-1] == 1 and (end.policy_version[-1] - end.policy_version[end.value == 3].max()) > 3
    staleness = series["staleness_max"].value
    assert staleness.max() <= 1  # synchronous: only the current version is trained on


def test_an_actor_job_of_plain_sbatch_waits_for_a_requeued_learner_job_and_joins_it_again(tmp_path):
    require_slurm(2)
    from lamarckian_hpc.storage import open_run

    launch = Launch(tmp_path, [*METRICS, "stop.target_return=null", "stop.total_env_steps=100000000",
                               "stop.max_wall_seconds=60", "storage.checkpoint_interval_seconds=2"], LEARNER)
    submitted = subprocess.run(["sbatch", "--parsable", f"--partition={CPU_PARTITION}", "--nodes=1",
                                "--cpus-per-task=2", "--time=10", f"--output={tmp_path / 'actors-%j.out'}",
                                str(ROOT / "slurm" / "actors.sbatch")],
                               env={**os.environ, "RUN_FILE": str(launch.run_path), "PYTHON": sys.executable,
                                    "LOG_DIR": str(tmp_path / "actor-logs")},
                               capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert submitted.returncode == 0, submitted.stderr
    actor_job = submitted.stdout.strip().split(";")[0]
    try:
        _wait_until(lambda: _hosts_now(launch.run_path) == 2, 180, "the actor job's node in the run")
        launch.requeue_at_time_limit()
        assert launch.finish(300) == 0, "".join(launch.output)
        log_path = tmp_path / f"actors-{actor_job}.out"
        _wait_until(lambda: "joins, run finished" in log_path.read_text(), 60, "the actor job to end with the run")
    finally:
        subprocess.run(["scancel", launch.job_id, actor_job], timeout=30)
    assert "requeued 1 times" in "".join(launch.output)
    log = log_path.read_text()
    assert log.count("joined the run") == 2 and "2 joins, run finished" in log, log  # before and after the requeue
    with open_run(launch.run_path) as run:
        hosts = run.metric("hosts_connected")
        meta = run.meta
    resumed_at = meta["resumed_through_version"]
    after = hosts.value[hosts.policy_version > resumed_at]
    assert meta["resumes"] == 1 and after.max() == 2  # the actor job's node trained the resumed run too


def test_join_says_why_it_cannot_join_before_anything_is_submitted(tmp_path, capsys):
    from lamarckian_hpc.cli import main
    from lamarckian_hpc.storage.join_folder import JoinFolder, RunContact, join_folder_of

    run_path = tmp_path / "run.h5"
    assert main(["join", str(run_path), "--nodes", "0"]) == 2
    assert "join options: nodes: Input should be greater than or equal to 1" in capsys.readouterr().err
    assert main(["join", str(run_path), "--time", "soon"]) == 2
    assert "time: expected minutes" in capsys.readouterr().err
    assert main(["join", str(run_path)]) == 2
    assert f"there is no {join_folder_of(run_path)} (actor jobs join runs launched on Slurm)" in capsys.readouterr().err
    folder = JoinFolder(join_folder_of(run_path))
    folder.publish(RunContact("10.0.0.1:6379", "token", "g", "1", str(run_path), 0.0))
    folder.finish()
    assert main(["join", str(run_path)]) == 2
    assert "it has finished" in capsys.readouterr().err


def _population_hosts(run_path: Path) -> list[set[str]]:
    """The hosts whose workers trained each finished PBT interval's members, as the run file holds them."""
    from lamarckian_hpc.storage import open_run

    try:
        with open_run(run_path) as run:
            rows = run.population()
    except (OSError, KeyError, ValueError):
        return []
    if not len(rows.get("generation", ())):
        return []
    return [{str(host) for host in rows["host"][rows["generation"] == generation]}
            for generation in range(int(rows["generation"].max()) + 1)]


def test_a_pbt_pool_grows_from_two_nodes_to_four_and_back_with_no_member_lost(tmp_path):
    require_slurm(4)
    from lamarckian_hpc.storage import open_run

    # Two workers on the job's two nodes; an actor job of two 1-CPU nodes adds one worker on each.
    launch = Launch(tmp_path, ["runtime.num_workers=2", "algorithm.population_size=4", "env.num_envs=4",
                               "ppo.num_epochs=2", "model.policy_hidden_sizes=[16]",
                               "algorithm.interval_env_frames=1024", "stop.target_return=null",
                               "stop.total_env_frames=100000000", "stop.max_wall_seconds=200"],
                    ["--partition", "debug", "--nodes", "2", "--cpus-per-node", "2", "--time", "10",
                     "--object-store-mb", "100"],
                    config=ROOT / "configs" / "pbt_ppo_cartpole.yaml", base=["storage.checkpoint_interval_seconds=30"])
    actor_job = ""
    try:
        _wait_until(lambda: len(_population_hosts(launch.run_path)) >= 1, 180, "the first interval")
        actor_job = subprocess.run(
            [sys.executable, "-m", "lamarckian_hpc", "join", str(launch.run_path), "--partition", CPU_PARTITION,
             "--nodes", "2", "--cpus-per-node", "1", "--time", "10", "--object-store-mb", "100",
             "--folder", str(tmp_path / "jobs")], capture_output=True, text=True, timeout=60, cwd=tmp_path,
        ).stdout.split("submitted actor job ")[1].split(":")[0]
        _wait_until(lambda: any(len(hosts) == 4 for hosts in _population_hosts(launch.run_path)), 180,
                    "an interval on four nodes")
        grown = len(_population_hosts(launch.run_path))
        subprocess.run(["scancel", actor_job], check=True, timeout=30)
        _wait_until(lambda: len(_population_hosts(launch.run_path)) > grown + 1
                    and len(_population_hosts(launch.run_path)[-1]) == 2, 120, "intervals on two nodes again")
        assert launch.finish(240) == 0, "".join(launch.output)
    finally:
        subprocess.run(["scancel", launch.job_id, *([actor_job] if actor_job else [])], timeout=30)
    hosts = _population_hosts(launch.run_path)
    assert [len(h) for h in hosts][0] == 2 and max(len(h) for h in hosts) == 4 and len(hosts[-1]) == 2, hosts
    assert hosts[-1] == hosts[0]  # back on the job's own nodes
    with open_run(launch.run_path) as run:
        rows = run.population()
        summary = run.summary()
    assert summary.closed_cleanly
    # No member lost: four members every interval, each with more frames than at the one before
    # (it went on from its state wherever it moved, never from scratch).
    frames = np.stack([rows["env_frames"][rows["generation"] == g] for g in range(len(hosts))])
    assert frames.shape[1] == 4 and np.all(np.diff(frames, axis=0) > 0), frames
    log = next((tmp_path / "jobs" / launch.job_id).glob("*_0_log.err")).read_text()
    assert "pool: 4 workers on 4 hosts (joined: " in log and "pool: 2 workers on 2 hosts (left: " in log, log
