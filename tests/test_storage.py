"""Run files: round trip, reading while another process writes, and reading after the writer is killed."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import h5py
import numpy as np
import pytest

from lamarckian_hpc.storage import (
    SCHEMA_VERSION,
    STANDARD_METRICS,
    RunWriter,
    collect_meta,
    open_run,
)

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
LINE_TIMEOUT_SECONDS = 30.0


class WriterProcess:
    """A writer script in a child process, whose stdout lines are read with a timeout."""

    def __init__(self, script: str) -> None:
        python_path = os.pathsep.join([str(REPOSITORY_ROOT), os.environ.get("PYTHONPATH", "")])
        environment = dict(os.environ, PYTHONPATH=python_path)
        self.process = subprocess.Popen(
            [sys.executable, "-c", script],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=environment,
            cwd=REPOSITORY_ROOT,
        )
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read_lines, daemon=True).start()

    def _read_lines(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line.strip())
        self._lines.put("<eof>")

    def next_line(self) -> str:
        line = self._lines.get(timeout=LINE_TIMEOUT_SECONDS)
        assert line != "<eof>", f"writer exited early with code {self.process.wait()}"
        return line

    def wait_for(self, expected: str) -> list[str]:
        """Read lines until one equals `expected`; return the lines before it."""
        lines_before: list[str] = []
        while (line := self.next_line()) != expected:
            lines_before.append(line)
        return lines_before

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=LINE_TIMEOUT_SECONDS)


def test_round_trip_of_config_meta_and_metrics(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "run.h5"
    config = {"algorithm": "ppo", "ppo": {"learning_rate": 3e-4, "clip_range": 0.2}, "seeds": [0, 1], "note": None}
    broadcast_tree = {"learner": ["relay-0", "relay-1"], "relay-0": ["node-2"]}
    extra_meta = {
        "hosts": ["node-0", "node-1"],
        "broadcast_tree": broadcast_tree,
        "num_cores": np.int64(80),
        "gpu": None,
    }
    metric_names = (*STANDARD_METRICS, "custom_score")

    with RunWriter(path, config, metric_names, meta=extra_meta) as writer:
        for step in range(3):
            writer.append(
                "episode_return_mean", 10.0 * step, env_frames=1000 * step, policy_version=step, wall_time=0.5 * step
            )
            writer.append_many(
                {"loss_policy": -0.1 * step, "custom_score": float(step) ** 2},
                env_frames=1000 * step,
                policy_version=step,
            )
            writer.flush()
        writer.append("episode_return_mean", 99.0, env_frames=5000, policy_version=7, wall_time=9.0)
        with pytest.raises(ValueError, match="not_declared.*episode_return_mean"):
            writer.append("not_declared", 1.0, env_frames=0, policy_version=0)
        with pytest.raises(ValueError, match="not_declared"):
            writer.append_many({"entropy": 1.0, "not_declared": 2.0}, env_frames=0, policy_version=0)
    writer.close()  # closing twice does nothing
    with pytest.raises(RuntimeError):
        writer.append("entropy", 1.0, env_frames=0, policy_version=0)

    with open_run(path) as reader:
        assert reader.closed_cleanly
        assert reader.config == config
        assert reader.meta["schema_version"] == SCHEMA_VERSION
        assert reader.meta["hosts"] == ["node-0", "node-1"]
        assert reader.meta["broadcast_tree"] == broadcast_tree
        assert reader.meta["num_cores"] == 80 and reader.meta["gpu"] is None
        assert reader.meta["pid"] == os.getpid()
        assert reader.meta["command_line"] == sys.argv
        assert reader.meta["dependency_versions"]["h5py"] == h5py.__version__
        assert set(reader.metric_names()) == set(metric_names)

        returns = reader.metric("episode_return_mean")
        np.testing.assert_array_equal(returns.value, [0.0, 10.0, 20.0, 99.0])
        np.testing.assert_array_equal(returns.env_frames, [0, 1000, 2000, 5000])
        np.testing.assert_array_equal(returns.policy_version, [0, 1, 2, 7])
        np.testing.assert_array_equal(returns.wall_time, [0.0, 0.5, 1.0, 9.0])
        custom = reader.metric("custom_score")
        np.testing.assert_array_equal(custom.value, [0.0, 1.0, 4.0])
        assert np.all(np.diff(custom.wall_time) >= 0) and custom.wall_time[0] >= 0
        assert len(reader.metric("entropy")) == 0 and reader.metric("entropy").last() is None

        summary = reader.summary()
        assert summary.closed_cleanly and summary.env_frames == 5000 and summary.wall_time_seconds >= 9.0
        assert summary.last_values["episode_return_mean"] == 99.0 and summary.last_values["entropy"] is None
        assert summary.counts["loss_policy"] == 3
        assert json.loads(json.dumps(summary.to_json_dict(), allow_nan=False))["counts"]["custom_score"] == 3

    with pytest.raises(FileExistsError):
        RunWriter(path, config, metric_names)
    RunWriter(path, {}, ["entropy"], overwrite=True).close()
    with open_run(path) as reader:
        assert reader.metric_names() == ["entropy"] and reader.config == {}


def test_a_run_that_failed_keeps_its_rows_but_is_not_marked_completed(tmp_path: Path) -> None:
    path = tmp_path / "failed.h5"
    writer = RunWriter(path, {}, ["entropy"])
    writer.append("entropy", 0.5, env_frames=10, policy_version=1)
    writer.close(completed=False)
    with open_run(path) as reader:
        assert not reader.closed_cleanly
        np.testing.assert_array_equal(reader.metric("entropy").value, [0.5])


def test_flush_if_due_and_collect_meta(tmp_path: Path) -> None:
    with RunWriter(tmp_path / "run.h5", {}, ["entropy"]) as writer:
        writer.append("entropy", 1.0, env_frames=1, policy_version=1)
        assert not writer.flush_if_due(interval_seconds=3600.0)
        assert writer.flush_if_due(interval_seconds=0.0)
        with open_run(writer.path) as reader:
            assert len(reader.metric("entropy")) == 1 and not reader.closed_cleanly
    meta = collect_meta({"hosts": ["a", "b"]})
    assert meta["hosts"] == ["a", "b"] and meta["schema_version"] == SCHEMA_VERSION
    assert meta["dependency_versions"]["numpy"] == np.__version__


GROWING_WRITER_SCRIPT = """
import sys, time
from lamarckian_hpc.storage import RunWriter
writer = RunWriter({path!r}, {{"seed": 3}}, ["episode_return_mean"])
for row in range(10):
    writer.append("episode_return_mean", float(row), env_frames=row, policy_version=row)
    writer.flush()
    print("flushed", row + 1, flush=True)
    time.sleep(0.05)
    if row in (4, 9):
        print("paused", flush=True)
        sys.stdin.readline()
writer.close()
print("closed", flush=True)
"""


def test_second_process_reads_while_writer_runs(tmp_path: Path) -> None:
    path = tmp_path / "growing.h5"
    writer_process = WriterProcess(GROWING_WRITER_SCRIPT.format(path=str(path)))
    try:
        writer_process.wait_for("paused")
        with open_run(path) as reader:
            assert reader.config == {"seed": 3}
            assert not reader.closed_cleanly
            first_rows = len(reader.metric("episode_return_mean"))
            assert first_rows == 5

            writer_process.send("continue")
            writer_process.wait_for("paused")
            series = reader.metric("episode_return_mean")  # same open reader, refreshed
            assert len(series) == 10 > first_rows
            np.testing.assert_array_equal(series.value, np.arange(10.0))
            assert not reader.closed_cleanly
            with open_run(path) as fresh_reader:
                assert len(fresh_reader.metric("episode_return_mean")) == 10

            writer_process.send("close")
            writer_process.wait_for("closed")
            assert writer_process.process.wait(timeout=LINE_TIMEOUT_SECONDS) == 0
            assert reader.closed_cleanly
        with open_run(path) as reader:
            assert reader.closed_cleanly and reader.summary().counts == {"episode_return_mean": 10}
    finally:
        writer_process.stop()


KILLED_WRITER_SCRIPT = """
import time
from lamarckian_hpc.storage import RunWriter
writer = RunWriter({path!r}, {{"seed": 4}}, ["episode_return_mean", "entropy"])
for row in range(100000):
    writer.append_many(
        {{"episode_return_mean": 0.5 * row, "entropy": -float(row)}}, env_frames=100 * row, policy_version=row
    )
    writer.flush()
    print("flushed", row + 1, flush=True)
    time.sleep(0.02)
"""


def test_rows_flushed_before_sigkill_survive(tmp_path: Path) -> None:
    path = tmp_path / "killed.h5"
    writer_process = WriterProcess(KILLED_WRITER_SCRIPT.format(path=str(path)))
    try:
        announced_rows = 0
        while announced_rows < 5:
            announced_rows = int(writer_process.next_line().split()[1])
        os.kill(writer_process.process.pid, signal.SIGKILL)
        assert writer_process.process.wait(timeout=LINE_TIMEOUT_SECONDS) == -signal.SIGKILL
    finally:
        writer_process.stop()

    with h5py.File(path, "r", libver="latest", swmr=True):
        pass
    with open_run(path) as reader:
        assert not reader.closed_cleanly
        assert reader.config == {"seed": 4}
        returns = reader.metric("episode_return_mean")
        rows = len(returns)
        assert rows >= announced_rows
        np.testing.assert_array_equal(returns.value, 0.5 * np.arange(rows))
        np.testing.assert_array_equal(returns.env_frames, 100 * np.arange(rows))
        np.testing.assert_array_equal(returns.policy_version, np.arange(rows))
        entropy = reader.metric("entropy")
        assert len(entropy) >= announced_rows
        np.testing.assert_array_equal(entropy.value, -np.arange(len(entropy), dtype=float))
        summary = reader.summary()
        assert not summary.closed_cleanly and summary.env_frames == 100 * (max(rows, len(entropy)) - 1)


def test_run_files_and_new_folders_are_private(tmp_path):
    import stat

    path = tmp_path / "new" / "runs" / "private.h5"
    with RunWriter(path, {}, ["loss_value"]):
        pass
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o700
