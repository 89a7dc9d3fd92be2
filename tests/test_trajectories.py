"""Recorded episodes: what the controllers keep, what travels from actors, what the run file holds
(read while the run grows, after a SIGKILL, and up to the cap)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
from trajectory_checks import assert_episodes_consistent

from lamarckian_hpc.cli import main
from lamarckian_hpc.comm.wire import decode, encode
from lamarckian_hpc.mdp import Decision, EpisodeSelector, ExperienceBuffer, RecordedSteps, StepOutcome
from lamarckian_hpc.runtime.messages import experience_message, read_experience
from lamarckian_hpc.storage import RunFileReadError, RunWriter, continue_run_file, open_run
from lamarckian_hpc.storage.trajectories import EpisodeRecord, TrajectorySpec

ROOT = Path(__file__).resolve().parents[1]
CARTPOLE = ROOT / "configs" / "ppo_cartpole.yaml"
SERIAL = ["runtime.mode=serial", "env.num_envs=4", "algorithm.batch_size=512", "algorithm.num_minibatches=2",
          "stop.target_return=null"]


def test_the_selector_picks_the_first_episode_and_every_nth_after_it():
    selector = EpisodeSelector(3)
    assert [selector.start() is not None for _ in range(7)] == [True, False, False, True, False, False, True]
    assert all(EpisodeSelector(0).start() is None for _ in range(5))
    with pytest.raises(ValueError):
        EpisodeSelector(-1)


def _recorded(length: int, reward: float, agent: str = "0", terminated: bool = True) -> RecordedSteps:
    return RecordedSteps(agent, np.random.default_rng(length).random((length, 4), dtype=np.float32),
                         np.arange(length) % 2, np.full(length, reward, np.float32),
                         np.full(length, 3, np.int64), terminated)


def _batch():
    buffer = ExperienceBuffer()
    fragment = buffer.open()
    fragment.append(np.zeros(4, np.float32), Decision(0, -0.5, 3), StepOutcome(np.ones(4, np.float32), 1.0, True,
                                                                              False))
    buffer.finish(fragment, terminated=True)
    return buffer.take()


def test_recorded_episodes_travel_with_their_experience_and_keep_their_returns():
    recorded = ((0, _recorded(5, 1.0)), (2, _recorded(3, -0.5, agent="player_1", terminated=False)))
    returns = np.array([5.0, 7.0, -1.5])
    message = experience_message(1, _batch(), returns, np.array([5, 7, 3]), 15, recorded=recorded)
    experience = read_experience(decode([bytes(frame) for frame in encode(message)]))  # as it leaves the socket
    assert [index for index, _ in experience.recorded] == [0, 2]
    for (index, sent), (_, received) in zip(recorded, experience.recorded):
        np.testing.assert_array_equal(received.observations, sent.observations)
        np.testing.assert_array_equal(received.actions, sent.actions)
        assert received.agent_id == sent.agent_id and received.terminated == sent.terminated
        assert received.rewards.sum() == pytest.approx(experience.episode_returns[index])


@pytest.mark.parametrize("damage", ["lengths", "index", "agents"])
def test_recorded_episodes_that_do_not_add_up_are_refused(damage):
    message = experience_message(1, _batch(), np.array([5.0]), np.array([5]), 5, recorded=((0, _recorded(5, 1.0)),))
    if damage == "lengths":
        message.arrays["recorded_lengths"] = np.array([6])
    elif damage == "index":
        message.arrays["recorded_index"] = np.array([1])
    else:
        message.meta["recorded_agent_ids"] = [7]
    with pytest.raises(ValueError):
        read_experience(message)


def test_a_serial_run_records_whole_episodes_with_the_returns_it_counted(tmp_path, capsys):
    status = main(["train", str(CARTPOLE), *SERIAL, "stop.total_env_steps=6144", "storage.trajectories.every_episodes=3",
                   f"storage.directory={tmp_path}", "storage.run_name=run"])
    assert status == 0
    with open_run(tmp_path / "run.h5") as run:
        index = assert_episodes_consistent(run)
        episodes = run.metric("episodes").value[-1]
        steps = run.episode(int(index["episode"][0]))
    assert np.all(index["episode"] < episodes) and np.all(index["actor"] == 0)
    assert 0.2 * episodes / 3 < len(index["episode"]) <= episodes / 3 + 4  # one in three per start, four envs
    assert steps["observations"].shape == (len(steps["rewards"]), 4) and steps["observations"].dtype == np.float32
    assert set(np.unique(steps["actions"])) <= {0, 1}
    assert np.all(np.diff(index["env_frames"]) >= 0) and index["env_frames"][-1] <= 6144 + 512
    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "run.h5")]) == 0  # lists what `replay --episode K` can show
    assert f"recorded episodes of main: {len(index['episode'])}: {index['episode'][0]}, " in capsys.readouterr().out


def test_recording_off_leaves_no_trajectories(tmp_path):
    assert main(["train", str(CARTPOLE), *SERIAL, "stop.total_env_steps=1024", "storage.trajectories.every_episodes=0",
                 f"storage.directory={tmp_path}", "storage.run_name=unrecorded"]) == 0
    with h5py.File(tmp_path / "unrecorded.h5", "r", swmr=True) as file:
        assert "trajectories" not in file
    with open_run(tmp_path / "unrecorded.h5") as run:
        assert run.trajectory_policies() == []
        with pytest.raises(KeyError, match="records no trajectories"):
            run.episodes()


def test_the_cap_stops_recording_and_the_run_goes_on(tmp_path):
    status = main(["train", str(CARTPOLE), *SERIAL, "stop.total_env_steps=8192", "storage.trajectories.every_episodes=1",
                   "storage.trajectories.max_megabytes=0.02", "storage.trajectories.compression=none",
                   f"storage.directory={tmp_path}", "storage.run_name=capped"])
    assert status == 0
    with open_run(tmp_path / "capped.h5") as run:
        assert run.closed_cleanly and run.summary().env_frames >= 8192
        index = assert_episodes_consistent(run)
        episodes = run.metric("episodes").value[-1]
        stopped_at = run.meta["trajectories_stopped_at_env_frames"]
    assert len(index["episode"]) < episodes  # recording stopped before the run did
    assert int(index["length"].sum()) * (16 + 8 + 4 + 8) <= 0.02 * 2**20  # rows of obs, action, reward, version
    assert stopped_at < 8192 and index["env_frames"].max() <= stopped_at


def test_a_reader_sees_episodes_appear_and_a_sigkill_keeps_every_flushed_one(tmp_path):
    command = [sys.executable, "-m", "lamarckian_hpc", "train", str(CARTPOLE), *SERIAL,
               "stop.total_env_steps=10000000", "storage.trajectories.every_episodes=1",
               "storage.metrics_interval_seconds=0.2", f"storage.directory={tmp_path}", "storage.run_name=live"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    path, seen = tmp_path / "live.h5", []
    try:
        deadline = time.monotonic() + 120
        while len(set(seen)) < 3 and time.monotonic() < deadline:  # three different counts, run still going
            assert process.poll() is None, process.stderr.read().decode()[-2000:]
            if path.exists():
                try:
                    with open_run(path) as run:
                        if run.trajectory_policies():
                            seen.append(len(run.episodes()["episode"]))
                except RunFileReadError:  # caught mid-flush; the next look sees it whole
                    pass
            time.sleep(0.3)
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    assert len(set(seen)) >= 3 and seen == sorted(seen), seen
    with open_run(path) as run:
        assert not run.closed_cleanly
        index = assert_episodes_consistent(run)
    assert len(index["episode"]) >= max(seen)


def _written(path: Path, frames: list[int]) -> None:
    writer = RunWriter(path, {}, ["x"], trajectories=[TrajectorySpec("main", (4,), "float32")])
    for number, env_frames in enumerate(frames):
        steps = _recorded(4 + number, 1.0)
        writer.append_episode(EpisodeRecord("main", "0", steps.observations, steps.actions, steps.rewards,
                                            steps.policy_versions, True, number, 4.0 + number, 0, "node1",
                                            env_frames, 0.1 * number))
    writer.append("x", 1.0, env_frames=100, policy_version=1)
    writer.flush()
    writer._file.close()  # as if killed: no clean close


def test_a_continued_file_keeps_the_episodes_up_to_the_checkpoint(tmp_path):
    path = tmp_path / "run.h5"
    _written(path, [100, 200, 300, 400])
    writer = continue_run_file(path, ["x"], 1, through_env_frames=250,
                               trajectories=[TrajectorySpec("main", (4,), "float32")])
    writer.close()
    with open_run(path) as run:
        index = assert_episodes_consistent(run)
        np.testing.assert_array_equal(index["episode"], [0, 1])
        np.testing.assert_array_equal(index["host"], ["node1", "node1"])


def test_an_unknown_episode_or_policy_is_one_clear_error(tmp_path):
    path = tmp_path / "run.h5"
    _written(path, [100])
    with open_run(path) as run:
        with pytest.raises(KeyError, match="episode 5 of policy 'main' is not recorded"):
            run.episode(5)
        with pytest.raises(KeyError, match="no trajectories of policy 'other'"):
            run.episodes("other")
