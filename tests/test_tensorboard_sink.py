"""The live TensorBoard sink (`storage.tensorboard`, `--tensorboard DIR`): event files written while
a run goes on, read back with TensorBoard's own reader (EventAccumulator), under the run file's
metric names and at its rows' env frames; a killed run's resume continues its series without going
back in steps; PBT members and league learners each get their series; a sink that fails costs one
log line, never the run.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import lamarckian_hpc
from lamarckian_hpc.runtime.learner.checkpoint import checkpoint_path, load_checkpoint
from lamarckian_hpc.storage import open_run

pytest.importorskip("tensorboardX", reason="the export extra writes the event files")
event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator",
                                        reason="the test extra's TensorBoard reads the event files")

ROOT = Path(__file__).resolve().parents[1]
SERIAL = ["runtime.mode=serial", "env.num_envs=4", "algorithm.batch_size=512", "algorithm.num_minibatches=2",
          "stop.target_return=null"]


def scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series in a run's event folder, as TensorBoard reads it (purges included)."""
    if not folder.is_dir():
        return {}
    reader = event_accumulator.EventAccumulator(str(folder), size_guidance={event_accumulator.SCALARS: 0})
    reader.Reload()
    return {tag: [(event.step, event.value) for event in reader.Scalars(tag)] for tag in reader.Tags()["scalars"]}


def assert_matches_run_file(series: dict[str, list[tuple[int, float]]], run: Path, names: list[str],
                            step: str = "env_frames") -> None:
    """Each named series holds exactly the run file's rows of that metric: same steps (the rows'
    env frames; `policy_version`, the generation, for a population run), same values (as 32-bit
    floats)."""
    with open_run(run) as reader:
        for name in names:
            rows = reader.metric(name)
            steps = [step for step, _ in series[name]]
            assert steps == getattr(rows, step).tolist(), name
            np.testing.assert_allclose([value for _, value in series[name]], rows.value.astype(np.float32),
                                       rtol=1e-6, err_msg=name)


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.2)


@pytest.mark.second_pass  # over 15 s on two cores
def test_a_training_run_is_watched_while_it_runs_and_its_resume_never_goes_back_in_steps(tmp_path):
    board, run = tmp_path / "board", tmp_path / "runs" / "watched.h5"
    command = [sys.executable, "-m", "lamarckian_hpc", "train", str(ROOT / "configs" / "ppo_cartpole.yaml"),
               *SERIAL, "stop.total_env_steps=400000", "storage.run_name=watched",
               "storage.checkpoint_interval_seconds=0.5", "storage.metrics_interval_seconds=0.2",
               "--tensorboard", str(board)]
    process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    folder = board / "watched"  # one folder per run, named as its run file
    seen: list[dict] = []
    try:
        def two_points_past_a_checkpoint() -> bool:
            seen.append(scalars(folder))
            ckpt = checkpoint_path(run)
            points = seen[-1].get("learning_rate", [])
            return (len(points) >= 2 and ckpt.exists()
                    and points[-1][0] > load_checkpoint(ckpt).env_frames)  # events the resume must drop

        _wait_for(two_points_past_a_checkpoint, 120, "two flushed points past a checkpoint")
        assert process.poll() is None  # read while the run still goes on
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    live = seen[-1]
    with open_run(run) as reader:
        assert set(live) <= set(reader.metric_names())  # the run file's names, nothing of its own
    assert {"episode_return_mean", "loss_policy", "env_frames_per_second"} <= set(live)
    saved = load_checkpoint(checkpoint_path(run))

    total = saved.env_frames + 2048
    resumed = subprocess.run([sys.executable, "-m", "lamarckian_hpc", "train", "--resume", str(run),
                              f"stop.total_env_steps={total}"], cwd=tmp_path, capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert len(list(folder.iterdir())) == 2  # the resume's own event file, beside the first
    after = scalars(folder)
    steps = [step for step, _ in after["learning_rate"]]
    assert steps == sorted(set(steps)) and steps[-1] == total  # never back in steps, each step once
    # The killed run's points past the checkpoint are gone, as its rows are from the run file.
    assert_matches_run_file(after, run, ["learning_rate", "loss_policy", "episode_return_mean"])


@pytest.mark.second_pass
@pytest.mark.slow
def test_a_distributed_run_is_watched_while_it_runs(tmp_path):
    """Ray actors, the learner in the driver: the process that writes the run file writes the events."""
    board = tmp_path / "board"
    command = [sys.executable, "-m", "lamarckian_hpc", "train", str(ROOT / "configs" / "ppo_cartpole.yaml"),
               "runtime.mode=ray", "runtime.num_actors=2", "stop.total_env_steps=30000", "stop.target_return=null",
               "storage.run_name=distributed", "storage.metrics_interval_seconds=0.2", "--tensorboard", str(board)]
    process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    folder = board / "distributed"
    try:
        _wait_for(lambda: len(scalars(folder).get("env_frames_per_second", [])) >= 2 or process.poll() is not None,
                  240, "two flushed points")
        assert process.poll() is None, process.stderr.read().decode()[-2000:]  # still running
        _, stderr = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
    assert process.returncode == 0, stderr.decode()[-2000:]
    assert_matches_run_file(scalars(folder), tmp_path / "runs" / "distributed.h5",
                            ["env_frames_per_second", "staleness_mean", "learning_rate"])


def test_pbt_members_and_league_learners_get_a_series_each(tmp_path):
    board = tmp_path / "board"
    pbt = lamarckian_hpc.run(ROOT / "configs" / "pbt_ppo_cartpole.yaml", [
        "runtime.mode=serial", "algorithm.population_size=2", "algorithm.interval_env_frames=256",
        "stop.total_env_frames=768", "ppo.num_epochs=1", "stop.target_return=null", f"storage.tensorboard={board}"],
        output=tmp_path / "pbt.h5").path
    series = scalars(board / "pbt")
    assert_matches_run_file(series, pbt, ["best_return", "median_return"], "policy_version")
    steps = [step for step, _ in series["best_return"]]
    with open_run(pbt) as reader:
        population = reader.population()
        names = reader.genome_columns()
    for slot in range(2):  # row `slot` of each interval is member slot `slot`
        mine = np.flatnonzero(np.arange(len(population["id"])) % 2 == slot)
        assert [step for step, _ in series[f"member_{slot}/objective"]] == steps
        np.testing.assert_allclose([value for _, value in series[f"member_{slot}/objective"]],
                                   population["objectives"][mine, 0].astype(np.float32), rtol=1e-6)
        for name in names:  # the member's hyperparameters, by name
            np.testing.assert_allclose([value for _, value in series[f"member_{slot}/{name}"]],
                                       np.asarray(names[name])[mine].astype(np.float32), rtol=1e-6)

    league = lamarckian_hpc.run(ROOT / "configs" / "league_pong.yaml", [
        "runtime.mode=serial", "env.num_envs=2", "env.kwargs.points_to_win=1", "ppo.batch_size=128",
        "ppo.num_minibatches=2", "ppo.num_epochs=1", "model.policy_hidden_sizes=[16]", "league.snapshot_interval=1",
        "algorithm.generations=2", "algorithm.scripted_evaluation_interval=0", f"storage.tensorboard={board}"],
        output=tmp_path / "league.h5").path
    learners = ["main_0", "main_exploiter_0", "league_exploiter_0"]
    assert_matches_run_file(scalars(board / "league"), league, [f"{kind}_{name}" for name in learners
                                                                for kind in ("elo", "return")], "policy_version")

    nsga2 = lamarckian_hpc.run(ROOT / "configs" / "nsga2_zdt1.yaml", [
        "runtime.mode=serial", "algorithm.generations=3", "algorithm.population_size=8",
        f"storage.tensorboard={board}"], output=tmp_path / "nsga2.h5").path
    series = scalars(board / "nsga2")
    assert_matches_run_file(series, nsga2, ["hypervolume"], "policy_version")  # one point per generation
    assert not any(tag.startswith("member_") for tag in series)  # NSGA-II's individuals are no members


def test_a_sink_that_fails_logs_one_line_and_the_run_goes_on(tmp_path, caplog):
    in_the_way = tmp_path / "not_a_folder"
    in_the_way.write_text("a file where the event folder should go")
    with caplog.at_level(logging.WARNING, logger="lamarckian_hpc.runtime.sinks.tensorboard"):
        result = lamarckian_hpc.run(ROOT / "configs" / "ppo_cartpole.yaml", [
            *SERIAL, "stop.total_env_steps=2048", f"storage.tensorboard={in_the_way}"], output=tmp_path / "ppo.h5")
    lines = [record for record in caplog.records if record.name == "lamarckian_hpc.runtime.sinks.tensorboard"]
    assert len(lines) == 1 and "stopped, the run goes on" in lines[0].getMessage()
    with open_run(result.path) as reader:
        assert reader.closed_cleanly and reader.metric("learning_rate").env_frames[-1] == 2048


def test_a_pbt_run_resumed_twice_from_one_checkpoint_keeps_each_step_once(tmp_path):
    """Resumed to a larger budget, then resumed again from the earlier checkpoint (as after a kill
    between an interval's rows and its checkpoint): the intervals done twice appear once, as in the
    run file, for the run's metrics and for every member."""
    from lamarckian_hpc.cli import main

    board = tmp_path / "board"
    common = [str(ROOT / "configs" / "pbt_ppo_cartpole.yaml"), "runtime.mode=serial", "algorithm.population_size=2",
              "algorithm.interval_env_frames=256", "ppo.num_epochs=1", "stop.target_return=null",
              f"storage.directory={tmp_path}", "storage.run_name=pbt"]
    assert main(["evolve", *common, "stop.total_env_frames=512", "--tensorboard", str(board)]) == 0
    run = tmp_path / "pbt.h5"
    checkpoint = checkpoint_path(run)
    after_one = checkpoint.read_bytes()
    assert main(["evolve", "--resume", str(run), "stop.total_env_frames=1024"]) == 0  # writes to board again
    checkpoint.write_bytes(after_one)
    assert main(["evolve", "--resume", str(run), "stop.total_env_frames=1280"]) == 0
    series = scalars(board / "pbt")
    assert len(list((board / "pbt").iterdir())) == 3
    steps = [step for step, _ in series["best_return"]]
    assert steps == sorted(set(steps))
    assert_matches_run_file(series, run, ["best_return", "median_return", "copies"], "policy_version")
    assert [step for step, _ in series["member_1/objective"]] == steps


@pytest.fixture
def full_disk(tmp_path):
    """A real tmpfs of 256 kB, filled to the last byte before the run starts."""
    from test_disk_full import _tmpfs

    for disk in _tmpfs(tmp_path, "256k"):
        filler = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(filler, b"\0" * 512):
                pass
        except OSError:  # no space left
            pass
        finally:
            os.close(filler)
        yield disk


def test_a_sink_whose_disk_is_full_logs_one_line_and_the_run_and_its_file_go_on(tmp_path, full_disk, caplog):
    with caplog.at_level(logging.WARNING, logger="lamarckian_hpc.runtime.sinks.tensorboard"):
        result = lamarckian_hpc.run(ROOT / "configs" / "ppo_cartpole.yaml", [
            *SERIAL, "stop.total_env_steps=4096", "storage.metrics_interval_seconds=0.01",
            f"storage.tensorboard={full_disk / 'tb'}"], output=tmp_path / "ppo.h5")
    lines = [record.getMessage() for record in caplog.records
             if record.name == "lamarckian_hpc.runtime.sinks.tensorboard"]
    assert len(lines) == 1 and "No space left on device" in lines[0] and "\n" not in lines[0], lines
    with open_run(result.path) as reader:
        assert reader.closed_cleanly and reader.metric("learning_rate").env_frames.tolist() == list(range(512, 4097, 512))
