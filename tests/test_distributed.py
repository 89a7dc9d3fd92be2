"""The distributed runtime with a real local Ray, real actor processes and real ZeroMQ sockets:
it learns in both sampling modes, keeps synchronous samples fresh, survives a killed actor, and
its actors sample without loading torch."""

from __future__ import annotations

import os
import signal
import socket
import threading
from pathlib import Path

import numpy as np
import psutil
import pytest

ray = pytest.importorskip("ray")

from local_ray import local_ray  # noqa: E402
from trajectory_checks import assert_episodes_consistent  # noqa: E402

from benchmarks.reliability.chaos import bad_experience  # noqa: E402  (the chaos benchmark's bad messages)
from lamarckian_hpc.config import load_config  # noqa: E402
from lamarckian_hpc.runtime.run_shape import POLICY_ID  # noqa: E402
from lamarckian_hpc.runtime.runners.distributed import DistributedTrainer  # noqa: E402
from lamarckian_hpc.runtime.runners.recording import MetricsRecorder, trajectory_writer_options  # noqa: E402
from lamarckian_hpc.runtime.runners.training_run import metric_names_for  # noqa: E402
from lamarckian_hpc.storage import RunWriter, open_run  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
CARTPOLE = CONFIGS / "ppo_cartpole.yaml"


@pytest.fixture(scope="module", autouse=True)
def module_ray():
    """One local Ray for the module; the trainers join it instead of starting their own."""
    with local_ray():
        yield


class Collect:
    """Keeps every update report (an observer, like the HDF5 recorder)."""

    def __init__(self) -> None:
        self.reports = []

    def on_update_end(self, report) -> None:
        self.reports.append(report)

    def on_train_end(self, result) -> None:
        pass


def _train(overrides: list[str], observers=(), config_file: Path = CARTPOLE):
    config = load_config(config_file, ["runtime.mode=ray", "runtime.num_actors=2", *overrides])
    trainer = DistributedTrainer(config, observers)
    try:
        return trainer, trainer.train()
    finally:
        trainer.close()


@pytest.mark.slow
@pytest.mark.parametrize("sampling", ["async", pytest.param("sync", marks=pytest.mark.second_pass)])
def test_ppo_with_two_actors_learns_cartpole(sampling):
    collect = Collect()
    _, result = _train([f"runtime.sampling={sampling}", "stop.total_env_steps=200000"], [collect])
    assert result.target_reached_at_frames is not None, f"{sampling}: mean return {result.recent_return_mean}"
    assert result.recent_return_mean >= 475.0
    staleness_max = max(report.metrics["staleness_max"] for report in collect.reports)
    if sampling == "sync":
        assert staleness_max == 0  # only samples of the version being updated are used
    else:
        assert staleness_max > 0  # actors do not wait: some samples come from older versions


#: Returns each algorithm reaches within the budget in every run. Asynchronous DQN reached 475 in
#: some runs and plateaued near 380 in others within 400k frames; 300 is far above a random
#: policy's 22 and below that plateau.
TARGETS = {"impala": 475.0, "a3c": 475.0, "dqn": 300.0}
#: DQN's actors send 128 frames a message here, not the config's 32: the learner takes the same
#: gradient steps per frame, in a quarter of the updates (and weight broadcasts).
OVERRIDES = {"dqn": ["runtime.rollout_steps=16"]}


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", [
    # DQN, A3C and IMPALA need the most time to their thresholds (DQN a minute or two on two cores,
    # A3C about 40 s, IMPALA 20 s): CI's second pass runs them.
    pytest.param(name, marks=pytest.mark.second_pass) if name in ("dqn", "a3c", "impala") else name
    for name in sorted(TARGETS)])
def test_other_algorithms_with_two_actors_learn_cartpole(algorithm):
    collect = Collect()
    target = TARGETS[algorithm]
    trainer, result = _train(["stop.total_env_steps=400000", f"stop.target_return={target}",
                              *OVERRIDES.get(algorithm, [])], [collect], CONFIGS / f"{algorithm}_cartpole.yaml")
    assert result.target_reached_at_frames is not None, f"{algorithm}: mean return {result.recent_return_mean}"
    assert result.recent_return_mean >= target
    assert trainer.learner.version == result.updates  # every update made a new policy version
    if algorithm == "dqn":
        assert collect.reports[-1].metrics["epsilon"] < 0.1  # the schedule reached the actors' policies


def test_max_policy_lag_drops_older_samples():
    collect = Collect()
    _train(["runtime.max_policy_lag=0", "stop.total_env_steps=8000", "stop.target_return=null"], [collect])
    assert all(report.metrics["staleness_max"] == 0 for report in collect.reports)
    assert collect.reports[-1].metrics["dropped_stale_steps"] > 0
    assert collect.reports[-1].metrics["malformed_messages"] == 0  # real actors' messages pass the learner's checks


class KillOneActor(Collect):
    """SIGKILLs actor 0's process once, after a few updates."""

    def __init__(self, trainer_ref: list) -> None:
        super().__init__()
        self.trainer_ref = trainer_ref
        self.killed_pid: int | None = None

    def on_update_end(self, report) -> None:
        super().on_update_end(report)
        trainer = self.trainer_ref[0]
        if self.killed_pid is None and report.update >= 5 and 0 in trainer.actor_pids:
            self.killed_pid = trainer.actor_pids[0]
            os.kill(self.killed_pid, signal.SIGKILL)


class ActorLibraries(Collect):
    """The shared libraries each actor process has mapped, read once per process after its hello."""

    def __init__(self, trainer_ref: list) -> None:
        super().__init__()
        self.trainer_ref = trainer_ref
        self.libraries: dict[int, set[str]] = {}

    def on_update_end(self, report) -> None:
        for pid in set(self.trainer_ref[0].actor_pids.values()) - set(self.libraries):
            try:
                self.libraries[pid] = {Path(region.path).name for region in psutil.Process(pid).memory_maps()}
            except psutil.NoSuchProcess:  # the actor this test kills
                pass


@pytest.mark.second_pass  # over 15 s on two cores
def test_a_killed_actor_is_restarted_and_the_run_finishes(tmp_path):
    config = load_config(CARTPOLE, ["runtime.mode=ray", "runtime.num_actors=2", "stop.total_env_steps=40000",
                                    "stop.target_return=null", "storage.metrics_interval_seconds=0.5",
                                    "storage.trajectories.every_episodes=5"])
    path = tmp_path / "killed.h5"
    trainer_ref: list = []
    killer = KillOneActor(trainer_ref)
    libraries = ActorLibraries(trainer_ref)
    trainer = DistributedTrainer(config, [killer, libraries])
    writer = RunWriter(path, config.to_json_dict(), metric_names_for(config),
                       **trajectory_writer_options(config, trainer.spaces, POLICY_ID))
    trainer.observers.append(MetricsRecorder(writer, 0.5))
    trainer_ref.append(trainer)
    try:
        result = trainer.train()
    finally:
        trainer.close()
    assert killer.killed_pid is not None
    assert result.env_frames >= 40000
    assert trainer.actor_pids[0] != killer.killed_pid  # a new process said hello
    # The actors sample with the torch-free policy: no actor process, restarted ones included, loads torch.
    assert len(libraries.libraries) >= 2
    for pid, names in libraries.libraries.items():
        assert any(name.startswith("_multiarray_umath") for name in names), pid  # numpy's: the maps were read
        assert not [name for name in names if name.startswith("libtorch")], pid
    with open_run(path) as run:
        assert run.closed_cleanly
        restarts = run.metric("actor_restarts")
        assert restarts.value[-1] >= 1
        kill_update = next(r.update for r in killer.reports if r.update >= 5)
        assert len(run.metric("loss_policy")) > kill_update  # learning went on after the kill
        assert np.all(np.isfinite(run.metric("loss_policy").value))
        cpu = run.metric("cpu_utilization").value
        assert np.all((cpu >= 0) & (cpu <= 1.5))
        # Episodes recorded on both actors, the restarted one included, reached the file whole.
        index = assert_episodes_consistent(run)
        assert set(index["actor"].tolist()) == {0, 1} and set(index["host"]) == {socket.gethostname()}
        assert np.all(index["episode"] < run.metric("episodes").value[-1])


class KillActorOnce(Collect):
    """SIGKILLs actor 0's process once, at `update`, and remembers when."""

    def __init__(self, trainer_ref: list, update: int) -> None:
        super().__init__()
        self.trainer_ref, self.update = trainer_ref, update
        self.killed_at: float | None = None

    def on_update_end(self, report) -> None:
        super().on_update_end(report)
        trainer = self.trainer_ref[0]
        if self.killed_at is None and report.update >= self.update and 0 in trainer.actor_pids:
            os.kill(trainer.actor_pids[0], signal.SIGKILL)
            self.killed_at = report.wall_time


@pytest.mark.second_pass
def test_synchronous_sampling_goes_on_at_once_after_an_actor_restarts(tmp_path):
    """A restarted actor's hello writes off its dead process's credits, so it gets credits at once
    instead of after the two minutes that reclaim a silent sender's; and a batch short of the dead
    actor's share is completed after runtime.sync_fill_seconds, saying whose share is missing."""
    config = load_config(CARTPOLE, ["runtime.mode=ray", "runtime.num_actors=2", "runtime.sampling=sync",
                                    "runtime.sync_fill_seconds=5", "stop.total_env_steps=24000",
                                    "stop.target_return=null"])
    trainer_ref: list = []
    killer = KillActorOnce(trainer_ref, update=2)
    trainer = DistributedTrainer(config, [killer])
    trainer_ref.append(trainer)
    try:
        result = trainer.train()
    finally:
        trainer.close()
    assert killer.killed_at is not None and result.env_frames >= 24000
    after = [report.wall_time for report in killer.reports if report.wall_time > killer.killed_at]
    assert after and after[0] - killer.killed_at < 60, "the run waited for the dead actor's credits"
    assert trainer.receiver.ledger.written_off >= 1 and trainer.receiver.ledger.reclaimed == 0
    assert killer.reports[-1].metrics["staleness_max"] == 0  # still only the current version


class SendBadMessages(Collect):
    """At `update`, a thread holding the job's actor keys sends `count` experience messages that
    decode but are wrong inside (benchmarks/reliability/chaos.py's) to the learner's experience address."""

    def __init__(self, trainer_ref: list, update: int, count: int) -> None:
        super().__init__()
        self.trainer_ref, self.update, self.count = trainer_ref, update, count
        self.sent: list[int] = []
        self.thread = None

    def on_update_end(self, report) -> None:
        super().on_update_end(report)
        if self.thread is None and report.update >= self.update:
            self.thread = threading.Thread(target=self._send, args=(report.policy_version,))
            self.thread.start()

    def _send(self, version: int) -> None:
        import zmq

        from lamarckian_hpc.comm import JobKeys
        from lamarckian_hpc.comm.channels import ExperienceSender

        trainer = self.trainer_ref[0]
        context = zmq.Context()
        sender = ExperienceSender(context, trainer.receiver.address, keys=JobKeys.load(trainer.keys.actor_folder),
                                  high_water_mark=self.count)
        try:
            self.sent.append(sum(sender.send(bad_experience(index, version), timeout_ms=10_000)
                                 for index in range(self.count)))
        finally:
            sender.socket.setsockopt(zmq.LINGER, 30_000)  # the queued ones leave before the socket closes
            sender.close()
            context.term()


@pytest.mark.second_pass  # over 15 s on two cores
def test_bad_messages_from_a_holder_of_the_keys_are_counted_and_training_goes_on():
    """Experience that decodes but does not fit (meta of the wrong types, NaN and inf, arrays that
    do not line up, 0-d arrays, actions out of range, an actor that does not exist, a version the
    learner has not made) is dropped and counted in malformed_messages, every kind of it; none
    reaches an update, so the weights stay finite and the run ends at its budget. (The learner's
    socket takes its connections in turn, so a flood from one costs the others a share, not all.)"""
    config = load_config(CARTPOLE, ["runtime.mode=ray", "runtime.num_actors=2", "stop.total_env_steps=40000",
                                    "stop.target_return=null"])
    trainer_ref: list = []
    bad = SendBadMessages(trainer_ref, update=3, count=16 * 2)
    trainer = DistributedTrainer(config, [bad])
    trainer_ref.append(trainer)
    try:
        result = trainer.train()
        bad.thread.join(30)
    finally:
        trainer.close()
    assert bad.sent == [bad.count]
    assert result.env_frames >= 40000
    assert trainer.receiver.malformed == bad.count
    assert bad.reports[-1].metrics["malformed_messages"] == bad.count
    assert all(np.isfinite(array).all() for array in trainer.learner.weights().values())
    assert all(np.isfinite(report.metrics["loss_policy"]) for report in bad.reports)


class EndLikeACrowdedHost(Collect):
    """Makes each run end the way that aborted the learner's process (`comm.channels.CLOSE_LINGER_MS`):
    after the last update the actors stop reading (SIGSTOP, as on a host whose cores are all taken),
    the learner sends its last weights twice more, so that every connection of its publisher is
    part way through a message when it closes, and the actors die (SIGKILL) the moment its socket
    has closed, while the connections are being torn down."""

    def __init__(self, trainer_ref: list, total_env_steps: int) -> None:
        super().__init__()
        self.trainer_ref, self.total_env_steps = trainer_ref, total_env_steps
        self.stopped: list[int] = []

    def on_update_end(self, report) -> None:
        super().on_update_end(report)
        if report.env_frames >= self.total_env_steps and not self.stopped:
            self.stopped = sorted(set(self.trainer_ref[0].actor_pids.values()))
            for pid in self.stopped:
                os.kill(pid, signal.SIGSTOP)

    def on_train_end(self, result) -> None:
        trainer = self.trainer_ref[0]
        publisher = trainer.publisher
        for _ in range(2):
            publisher.publish(trainer.learner.version, trainer.learner.weights())
        close = publisher.close

        def close_then_kill() -> None:
            close()
            for pid in self.stopped:
                os.kill(pid, signal.SIGKILL)

        publisher.close = close_then_kill


#: Runs in one process, flat and tree in turn, with weights of 4 MB (two 1024-unit layers, as in
#: benchmarks/scale/staleness.py) and a frame budget of two updates.
RUNS_IN_ONE_PROCESS = 20
RUN_FRAMES = 512


@pytest.mark.second_pass
def test_twenty_runs_start_and_end_in_one_process():
    """One process runs trainer after trainer, as benchmarks/scale/staleness.py does, and lives
    through every end, each made as likely as can be to abort it in libzmq (`EndLikeACrowdedHost`)."""
    for index in range(RUNS_IN_ONE_PROCESS):
        layout = ("flat", "tree")[index % 2]
        config = load_config(CARTPOLE, [
            "runtime.mode=ray", "runtime.num_actors=2", "runtime.sampling=async", f"runtime.broadcast={layout}",
            *(["runtime.simulated_nodes=2"] if layout == "tree" else []),
            "model.policy_hidden_sizes=[1024,1024]", "model.share_trunk=true", "algorithm.batch_size=256",
            "algorithm.num_epochs=1", "algorithm.num_minibatches=1", f"stop.total_env_steps={RUN_FRAMES}",
            "stop.target_return=null"])
        trainer_ref: list = []
        ends = EndLikeACrowdedHost(trainer_ref, RUN_FRAMES)
        trainer = DistributedTrainer(config, [ends])
        trainer_ref.append(trainer)
        try:
            result = trainer.train()
        finally:
            trainer.close()
        assert result.env_frames >= RUN_FRAMES, (index, layout)
        assert ends.stopped, (index, layout)  # the run ended the way this test makes it end
