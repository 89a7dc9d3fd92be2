"""`lamarckian-hpc launch` on the real Slurm test cluster (slurm/testcluster, 4 simulated nodes, no
accounting): a run on 4 nodes that bootstraps Ray everywhere, is requeued at its time limit and
continues its run file; a cancelled job that makes the launcher fail instead of hang; job states
without sacct. Every wait has a deadline."""

from __future__ import annotations

import importlib.util
import os
import queue
import re
import shlex
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from optional_parts import require_slurm, skip_unless_required

from lamarckian_hpc.cli import main
from lamarckian_hpc.config.launch import slurm_time_minutes

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "ppo_cartpole.yaml"
SHORT_RUN = ["stop.total_env_steps=100000000", "stop.target_return=null", "algorithm.batch_size=1024",
             "storage.checkpoint_interval_seconds=1", "storage.metrics_interval_seconds=1"]


class Launch:
    """`lamarckian-hpc launch` as a user runs it, with its output read line by line."""

    def __init__(self, tmp_path: Path, overrides: list[str], flags: list[str], config: Path = CONFIG,
                 base: list[str] = SHORT_RUN) -> None:
        command = [sys.executable, "-m", "lamarckian_hpc", "launch", str(config), *base,
                   f"storage.directory={tmp_path / 'runs'}", "storage.run_name=run", *overrides,
                   "--folder", str(tmp_path / "jobs"), "--poll", "0.5", "--wait-timeout", "400", *flags]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                        cwd=tmp_path)
        self.lines: queue.Queue[str] = queue.Queue()
        self.output: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        self.job_id = self.wait_for(r"submitted job (\d+)", 60).group(1)
        self.run_path = tmp_path / "runs" / "run.h5"

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.put(line)

    def wait_for(self, pattern: str, timeout_seconds: float) -> re.Match:
        deadline = time.monotonic() + timeout_seconds
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.5)
            except queue.Empty:
                if self.process.poll() is not None and self.lines.empty():
                    break
                continue
            self.output.append(line)
            if match := re.search(pattern, line):
                return match
        self.cancel()
        pytest.fail(f"no line matching {pattern!r} within {timeout_seconds} s:\n{''.join(self.output)}")

    def finish(self, timeout_seconds: float) -> int:
        try:
            status = self.process.wait(timeout_seconds)
        except subprocess.TimeoutExpired:
            self.cancel()
            pytest.fail(f"launch still running after {timeout_seconds} s:\n{''.join(self.output)}")
        while not self.lines.empty():
            self.output.append(self.lines.get())
        return status

    def requeue_at_time_limit(self) -> None:
        """What Slurm sends at `--signal=USR2@<delay>` before the time limit (submitit's own tests
        do the same), sent now rather than after minutes so that a test stays short; then the job
        back in the queue and running again."""
        subprocess.run(["scancel", "--signal=USR2", self.job_id], check=True, timeout=30)
        self.wait_for(rf"job {self.job_id}: PENDING \(restart 1\)", 120)
        # Slurm holds a requeued job for two minutes, long enough for the old run's step daemons
        # to exit (the new run's step has the same id, and its PMI2 socket the same name). Wait
        # for them, then let the job start.
        _wait_until(lambda: subprocess.run(["pgrep", "-f", rf"slurmstepd: \[{self.job_id}\."],
                                           capture_output=True).returncode != 0, 120, "the old steps to exit")
        subprocess.run(["scontrol", "update", f"JobId={self.job_id}", "StartTime=now"], check=True, timeout=30)
        self.wait_for(rf"job {self.job_id}: RUNNING \(restart 1\)", 120)

    def cancel(self) -> None:
        subprocess.run(["scancel", self.job_id], timeout=30)
        self.process.kill()


def _wait_until(predicate, timeout_seconds: float, what: str) -> None:
    deadline = time.monotonic() + timeout_seconds
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_seconds} s waiting for {what}")
        time.sleep(0.25)


def test_launch_options_are_checked_before_submitting(capsys):
    assert slurm_time_minutes("90") == 90 and slurm_time_minutes("1:30:00") == 90
    assert slurm_time_minutes("0:30") == 1 and slurm_time_minutes("1-00:00:00") == 1440
    assert main(["launch", str(CONFIG), "--nodes", "0", "--time", "soon"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0
    assert "nodes: Input should be greater than or equal to 1" in error
    assert "time: expected minutes, MM:SS, HH:MM:SS or D-HH:MM:SS, got 'soon'" in error


def test_every_launch_option_has_a_flag():
    from lamarckian_hpc.cluster.command import LAUNCH_FLAGS
    from lamarckian_hpc.config.launch import LaunchConfig

    assert {field for field, _, _ in LAUNCH_FLAGS.values()} == set(LaunchConfig.model_fields)


def test_nodes_join_ray_in_waves_that_grow_while_the_head_keeps_up():
    from lamarckian_hpc.cluster.ray_cluster import RaySettings, next_wave_size

    settings = RaySettings(join_wave_max=32, join_wave_slowdown=1.5)
    assert next_wave_size(1, 4.0, 4.0, False, settings) == 2            # as fast as one node alone: double
    assert next_wave_size(2, 5.0, 4.0, False, settings) == 4
    assert next_wave_size(4, 9.0, 4.0, False, settings) == 4            # slower: hold
    assert next_wave_size(8, 5.0, 4.0, True, settings) == 4             # a node needed another attempt: halve
    assert next_wave_size(1, 30.0, 4.0, True, settings) == 1
    assert next_wave_size(32, 4.0, 4.0, False, settings) == 32          # capped


def test_every_node_of_a_job_is_given_the_runs_node_loss_timeout():
    """Ray counts a node dead after `runtime.node_loss_seconds` of unanswered checks, once a
    second, on every node of the job (its own defaults give about 15 s)."""
    from lamarckian_hpc.cluster.ray_cluster import RaySettings, _ray_env
    from lamarckian_hpc.config import ConfigError, load_config

    env = _ray_env("token", RaySettings(node_loss_seconds=45))
    assert env["RAY_health_check_period_ms"] == env["RAY_health_check_timeout_ms"] == "1000"
    assert env["RAY_health_check_failure_threshold"] == "45"
    assert _ray_env("token", RaySettings())["RAY_health_check_failure_threshold"] == "30"
    assert load_config(CONFIG).runtime.node_loss_seconds == 30
    with pytest.raises(ConfigError, match="runtime.node_loss_seconds"):
        load_config(CONFIG, ["runtime.node_loss_seconds=1"])


def test_a_rank_whose_mpi_never_lets_it_end_is_ended_with_its_exit_code_and_keeps_its_result(tmp_path):
    """A node cut off the network and back left rank 0 stuck inside MPI (a test of the release's
    request in the fabric's TCP provider) and the job alive for ever: once its part is done, a
    rank's process ends after a grace time whatever it is stuck in (here, a sleep that never ends),
    and rank 0 keeps the driver's result first, which it will never return."""
    kept = tmp_path / "result"
    code = ("import time; from lamarckian_hpc.cluster.ray_cluster import end_if_stuck\n"
            f"end_if_stuck(0.5, 3, 0, keep_outcome=lambda: open({str(kept)!r}, 'w').write('the result'))\n"
            "time.sleep(60)\n")
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=50)
    assert result.returncode == 3 and time.monotonic() - started < 30
    assert "rank 0: MPI did not let this process end within 0 s" in result.stderr, result.stderr
    assert kept.read_text() == "the result"


def test_a_kept_outcome_is_the_one_the_launcher_collects(tmp_path, monkeypatch):
    """What rank 0 keeps when MPI holds it (`keep_job_outcome`) is what the launcher reads back: the
    result of a run that finished, or the one line of the error that stopped it."""
    import submitit

    from lamarckian_hpc.cluster.job import keep_job_outcome
    from lamarckian_hpc.cluster.launcher import _exception_line
    from lamarckian_hpc.runtime.placement.node_watch import NodeLostError

    for name, value in {"SUBMITIT_FOLDER": str(tmp_path), "SUBMITIT_EXECUTOR": "slurm", "SLURM_JOB_ID": "77",
                        "SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0", "SLURM_NODEID": "0"}.items():
        monkeypatch.setenv(name, value)
    paths = submitit.core.utils.JobPaths(tmp_path, job_id="77", task_id=0)
    keep_job_outcome({"env_frames": 2048, "updates": 2})
    assert submitit.core.utils.pickle_load(paths.result_pickle) == ("success", {"env_frames": 2048, "updates": 2})
    try:
        raise NodeLostError("node node3 was lost at policy version 85")
    except NodeLostError as error:
        keep_job_outcome(error)
    kind, report = submitit.core.utils.pickle_load(paths.result_pickle)
    assert kind == "error"
    assert _exception_line(report).endswith("NodeLostError: node node3 was lost at policy version 85")


def test_a_rank_stuck_waiting_for_the_release_ends_once_the_head_is_gone_and_takes_its_ray_node(tmp_path):
    """The rank below a node that dropped off the network waited for the head's release inside MPI,
    where its own polls never ran, and kept the job alive until its time limit: a thread of its own
    watches the head and ends the process (exit code 0) a grace time after the head is gone, and the
    Ray node's session (here a sleep in a session of its own) goes with it."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there: the head is gone
    code = ("import sys, time\n"
            "from lamarckian_hpc.cluster.ray_cluster import HeadGone, end_once_head_gone\n"
            "from lamarckian_hpc.cluster.ray_node import RayNodeProcess\n"
            f"node = RayNodeProcess(['sleep', '300'], {str(tmp_path / 'ray')!r}, {{}}, {str(tmp_path / 'ray.log')!r})\n"
            "print(node.process.pid, flush=True)\n"
            f"end_once_head_gone(HeadGone('127.0.0.1', {port}, gone_seconds=0.5), 0.5, 2, node)\n"
            "time.sleep(60)\n")
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=50)
    assert result.returncode == 0 and time.monotonic() - started < 30, result.stderr
    assert "rank 2: MPI did not let this process end within 0 s" in result.stderr, result.stderr
    node_pid = int(result.stdout.split()[0])
    deadline = time.monotonic() + 10
    while Path(f"/proc/{node_pid}").exists() and time.monotonic() < deadline:  # reaped by init once killed
        time.sleep(0.1)
    assert not Path(f"/proc/{node_pid}").exists() or "Z" in Path(f"/proc/{node_pid}/stat").read_text().split()[2]


def test_a_head_that_answers_is_not_gone():
    from lamarckian_hpc.cluster.ray_cluster import HeadGone

    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        head_gone = HeadGone("127.0.0.1", listening.getsockname()[1], gone_seconds=0.0)
        assert not head_gone() and not head_gone()


def test_job_states_come_from_the_controller_without_accounting(tmp_path):
    require_slurm(1)
    from lamarckian_hpc.cluster.scheduler import GONE, job_state

    assert subprocess.run(["sacct", "-j", "1"], capture_output=True, timeout=30).returncode != 0  # no accounting
    submitted = subprocess.run(["sbatch", "--parsable", "-o", str(tmp_path / "out"), "--wrap", "exit 3"],
                               capture_output=True, text=True, timeout=30, check=True)
    job_id = submitted.stdout.strip().split(";")[0]
    _wait_until(lambda: job_state(job_id).final, 60, f"job {job_id} to end")
    state = job_state(job_id)
    assert (state.state, state.exit_code, state.source) == ("FAILED", "3:0", "scontrol")
    assert job_state("999999").state == GONE


def _partition_nodes(partition: str) -> set[str]:
    done = subprocess.run(["sinfo", "-h", "-N", "-p", partition, "-o", "%N"], capture_output=True, text=True,
                          timeout=30, check=True)
    return set(done.stdout.split())


def test_learner_and_cpu_jobs_go_to_their_own_partitions(tmp_path):
    """The test cluster's two partitions, as a site's: a job asking for a GPU in `learner` runs on a
    learner node (whose GPU is a GRES without a real device) and is given that GPU; a job in `cpu`
    runs on a cpu node without one. `debug`, the default, still holds every node."""
    require_slurm(1)
    learner, cpu = os.environ.get("TESTCLUSTER_LEARNER_PARTITION"), os.environ.get("TESTCLUSTER_CPU_PARTITION")
    if not learner or not cpu:
        skip_unless_required("slurm", "not the test cluster's partitions: source $TESTCLUSTER_DIR/env "
                                      "(slurm/testcluster/start.sh writes TESTCLUSTER_LEARNER_PARTITION)")
    learner_nodes = set(subprocess.run(["scontrol", "show", "hostnames", os.environ["TESTCLUSTER_LEARNER_NODES"]],
                                       capture_output=True, text=True, timeout=30, check=True).stdout.split())
    assert _partition_nodes(learner) == learner_nodes
    cpu_nodes = _partition_nodes(cpu)
    all_nodes = set(subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True, timeout=30,
                                   check=True).stdout.split())
    assert cpu_nodes and learner_nodes | cpu_nodes == all_nodes == _partition_nodes("debug")
    from lamarckian_hpc.cluster.scheduler import job_state

    report = ('echo "host=$(hostname) partition=$SLURM_JOB_PARTITION job_gpus=$SLURM_JOB_GPUS '
              'cuda=$CUDA_VISIBLE_DEVICES"')
    gpu_request = shlex.split(os.environ["TESTCLUSTER_GPU_REQUEST"])
    jobs = {}
    for partition, extra in ((learner, gpu_request), (cpu, [])):
        out = tmp_path / f"{partition}.out"
        submitted = subprocess.run(["sbatch", "--parsable", "-p", partition, *extra, "-t", "5", "-o", str(out),
                                    "--wrap", report], capture_output=True, text=True, timeout=30)
        assert submitted.returncode == 0, submitted.stderr
        jobs[partition] = (submitted.stdout.strip().split(";")[0], out)
    try:
        for job_id, _ in jobs.values():
            _wait_until(lambda job_id=job_id: job_state(job_id).final, 120, f"job {job_id} to end")
    finally:
        subprocess.run(["scancel", *(job_id for job_id, _ in jobs.values())], capture_output=True, timeout=30)
    seen = {}
    for partition, (job_id, out) in jobs.items():
        assert job_state(job_id).state == "COMPLETED", (partition, job_state(job_id))
        seen[partition] = dict(word.split("=", 1) for word in out.read_text().split())
    assert seen[learner]["host"] in learner_nodes and seen[learner]["partition"] == learner, seen
    assert seen[learner]["job_gpus"] and seen[learner]["cuda"], f"the learner job was given no GPU: {seen}"
    assert seen[cpu]["host"] in cpu_nodes and seen[cpu]["partition"] == cpu, seen
    assert not seen[cpu]["job_gpus"], seen
    if not cpu_nodes & learner_nodes:  # with more than one node: no GPU to be had in the cpu partition
        refused = subprocess.run(["sbatch", "--parsable", "-p", cpu, *gpu_request, "--wrap", "true"],
                                 capture_output=True, text=True, timeout=30)
        assert refused.returncode != 0 and "Requested node configuration is not available" in refused.stderr, \
            refused.stdout + refused.stderr


DRIVER_THAT_FAILS = """
import os
from lamarckian_hpc.cluster.ray_cluster import run_on_ray_cluster
def driver(info):
    import ray
    alive = [node for node in ray.nodes() if node["Alive"]]
    print("job", os.environ["SLURM_JOB_ID"], "ray nodes", len(alive), sorted(info.node_ids), flush=True)
    raise RuntimeError("driver failed on purpose")
run_on_ray_cluster(driver, log_dir=os.environ["LOG_DIR"])
"""


def test_ray_cluster_spans_the_nodes_and_is_torn_down_when_the_driver_fails(tmp_path):
    require_slurm(2)
    done = subprocess.run(["srun", "-N", "2", "--mpi=pmi2", "--kill-on-bad-exit=1", sys.executable, "-c",
                           DRIVER_THAT_FAILS], capture_output=True, text=True, timeout=180,
                          env={**os.environ, "LOG_DIR": str(tmp_path)})
    assert done.returncode != 0
    assert "driver failed on purpose" in done.stderr
    # Slurm picks any 2 idle nodes (after a node-loss test, node2 may still be completing).
    spanned = re.search(r"job (\d+) ray nodes 2 \['(node\d)', '(node\d)'\]", done.stdout)
    assert spanned and spanned.group(2) != spanned.group(3), \
        f"the driver did not see both nodes:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    job_id = spanned.group(1)
    marker = f"lhr-{job_id}-"
    leftovers = [pid for pid in os.listdir("/proc") if pid.isdigit() and _cmdline_has(pid, marker)]
    assert not leftovers, f"Ray processes of job {job_id} outlived it: {leftovers}"
    assert not [name for name in os.listdir("/tmp") if name.startswith(marker)]


DRIVER_THAT_COUNTS = """
import os
from lamarckian_hpc.cluster.ray_cluster import RaySettings, run_on_ray_cluster
def driver(info):
    import ray
    alive = sorted({node["NodeManagerAddress"] for node in ray.nodes() if node["Alive"]})
    print("ray nodes", len(alive), "addresses", ",".join(alive), "joined in", info.join_seconds, "s", flush=True)
run_on_ray_cluster(driver, log_dir=os.environ["LOG_DIR"], settings=RaySettings(object_store_bytes=80 * 1024 * 1024))
"""


def test_ray_bootstraps_over_every_node_of_the_cluster(tmp_path):
    """Every node of the running test cluster (4 in CI; the README's 16 on request) joins one Ray
    cluster: the joins come in waves and a node whose `ray start` times out is started again."""
    require_slurm(1)
    nodes = sorted(set(subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True,
                                      timeout=30, check=True).stdout.split()))
    require_slurm(len(nodes))
    started = time.monotonic()
    done = subprocess.run(["srun", "-N", str(len(nodes)), "--mpi=pmi2", "--kill-on-bad-exit=1", sys.executable, "-c",
                           DRIVER_THAT_COUNTS], capture_output=True, text=True, timeout=120 + 30 * len(nodes),
                          env={**os.environ, "LOG_DIR": str(tmp_path)})
    seconds = time.monotonic() - started
    joined = re.search(r"ray nodes (\d+) addresses (\S+) joined in ([\d.]+) s", done.stdout)
    assert done.returncode == 0 and joined, f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    expected = os.environ.get("TESTCLUSTER_NODE_ADDRS", "").split(",")
    assert int(joined.group(1)) == len(nodes)
    if len(expected) == len(nodes):  # each node its own address (slurm/testcluster)
        assert sorted(joined.group(2).split(",")) == sorted(expected)
    print(f"{len(nodes)} Ray nodes joined in {joined.group(3)} s; srun took {seconds:.1f} s")


def _cmdline_has(pid: str, marker: str) -> bool:
    try:
        return marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def test_cancelled_job_makes_launch_fail_instead_of_hang(tmp_path):
    require_slurm(1)
    launch = Launch(tmp_path, ["runtime.num_actors=1", "stop.max_wall_seconds=600"],
                    ["--nodes", "1", "--cpus-per-node", "1", "--time", "10"])
    launch.wait_for(rf"job {launch.job_id}: RUNNING", 120)
    subprocess.run(["scancel", launch.job_id], check=True, timeout=30)
    cancelled = time.monotonic()
    assert launch.finish(90) == 1
    assert time.monotonic() - cancelled < 60
    text = "".join(launch.output)
    # Either Slurm's cancellation is all the launcher sees, or the driver reported its SIGTERM first.
    assert f"error: job {launch.job_id} ended CANCELLED" in text, text
    assert "without a result" in text or "status -15" in text or "SIGTERM" in text, text


def test_launch_on_four_nodes_is_requeued_at_its_time_limit_and_continues(tmp_path):
    require_slurm(4)
    from lamarckian_hpc.comm.topology import build_tree
    from lamarckian_hpc.storage import open_run

    # The wall-time budget counts across the requeue: it leaves the resumed run time to train.
    board = tmp_path / "tb"  # the live TensorBoard sink, written by the job's learner on the shared file system
    launch = Launch(tmp_path, ["runtime.num_actors=4", "stop.max_wall_seconds=25", f"storage.tensorboard={board}"],
                    ["--nodes", "4", "--cpus-per-node", "2", "--time", "10", "--object-store-mb", "100"])
    checkpoint = launch.run_path.with_suffix(".ckpt")
    _wait_until(checkpoint.is_file, 180, "the first checkpoint")
    # The first process's sink makes its event file at its first report, which may come after the
    # first checkpoint on a busy machine.
    _wait_until(lambda: any((board / "run").glob("events.out.tfevents.*")), 60, "the first process's event file")
    launch.requeue_at_time_limit()
    assert launch.finish(240) == 0, "".join(launch.output)
    assert "requeued 1 times" in "".join(launch.output)

    hosts = ["node1", "node2", "node3", "node4"]
    with open_run(launch.run_path) as run:
        meta = run.meta
        summary = run.summary()
        series = run.metrics()
    assert summary.closed_cleanly
    assert list(meta["hosts"]) == hosts
    assert meta["broadcast_layout"] == "tree"  # runtime.broadcast: auto, actors on four hosts
    assert meta["broadcast_tree"] == build_tree(hosts).to_dict()
    assert sorted(meta["ray_nodes"]) == hosts                      # Ray ran on all 4 simulated nodes
    assert [node["node_name"] for node in meta["cluster_nodes"]] == hosts
    assert meta["resumes"] == 1 and meta["slurm_restart_count"] == 1
    resumed_at = meta["resumed_through_version"]
    frames = series["episode_return_mean"]
    assert resumed_at >= 1 and frames.policy_version[-1] > resumed_at   # trained before and after the requeue
    for name, rows in series.items():
        if len(rows.policy_version) > 1:                        # nothing recorded twice, nothing out of order
            assert np.all(np.diff(rows.policy_version) > 0), name
            assert np.all(np.diff(rows.env_frames) >= 0), name
    # The job wrote its event files, one per process of the run (before and after the requeue), and
    # TensorBoard reads the run file's rows from them, the requeued process's purge included.
    assert len(list((board / "run").glob("events.out.tfevents.*"))) == 2
    if importlib.util.find_spec("tensorboard") is not None:
        from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

        events = EventAccumulator(str(board / "run"), size_guidance={SCALARS: 0})
        events.Reload()
        for name in ("episode_return_mean", "env_frames_per_second"):
            assert [event.step for event in events.Scalars(name)] == series[name].env_frames.tolist(), name
