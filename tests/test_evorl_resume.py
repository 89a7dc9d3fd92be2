"""`evolve --resume` of the EvoRL runs (PBT+PPO, EMOGI, game testing): a run killed or stopped after a
checkpoint continues from it, its history has every interval or generation exactly once, ids stay
unique and lineage goes on, and the restored state is the saved one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from lamarckian_hpc.cli import main
from lamarckian_hpc.config import PBTConfig, load_config
from lamarckian_hpc.evorl.hosts import SerialHosts
from lamarckian_hpc.evorl.pbt_ppo import CHECKPOINT_KIND as PBT_KIND
from lamarckian_hpc.evorl.pbt_ppo import make_pbt
from lamarckian_hpc.runtime.checkpoint import checkpoint_path, load_run_state
from lamarckian_hpc.storage import open_run

ROOT = Path(__file__).resolve().parents[1]
PBT_TINY = ["env.num_envs=4", "ppo.batch_size=256", "ppo.num_epochs=2", "model.policy_hidden_sizes=[16]",
            "algorithm.interval_env_frames=512", "algorithm.truncation_fraction=0.5", "stop.target_return=null"]


def _evolve(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lamarckian_hpc", "evolve", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def _kill_after(command: list[str], cwd: Path, ready, timeout: float = 120) -> None:
    """Start `command` and SIGKILL it once `ready()` holds."""
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + timeout
        while True:
            assert time.monotonic() < deadline and process.poll() is None, "the run ended before it was killed"
            try:
                if ready():
                    break
            except (OSError, ValueError):  # not written yet
                pass
            time.sleep(0.05)
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


def _assert_lineage(ids: np.ndarray, parents: np.ndarray) -> None:
    """[intervals, size] ids and first parents: a member that is new in an interval has an id no
    earlier interval used and a parent from the interval before; the others keep id and parent."""
    for interval in range(1, len(ids)):
        new = ~np.isin(ids[interval], ids[interval - 1])
        assert (ids[interval][new] > ids[:interval].max()).all(), f"interval {interval} reuses an id"
        assert len(set(ids[interval].tolist())) == ids.shape[1]
        assert np.isin(parents[interval][new], ids[interval - 1]).all()
        assert (parents[interval][~new] == parents[interval - 1][~new]).all()


def test_killed_pbt_run_resumes_on_ray_after_its_last_interval(tmp_path, capsys):
    """A serial PBT run is SIGKILLed after its second interval's checkpoint; the restored members and
    PBT state equal the saved ones, and `evolve --resume` (on two Ray workers) trains two intervals
    more, with every interval in the run file once."""
    run = tmp_path / "runs" / "pbt.h5"
    checkpoint = checkpoint_path(run)
    _kill_after([sys.executable, "-m", "lamarckian_hpc", "evolve", str(ROOT / "configs" / "pbt_ppo_cartpole.yaml"),
                 *PBT_TINY, "runtime.mode=serial", "stop.total_env_frames=100000", "storage.run_name=pbt"],
                tmp_path, lambda: load_run_state(checkpoint, PBT_KIND)["interval"] >= 2)
    saved = load_run_state(checkpoint, PBT_KIND)
    done = int(saved["interval"])  # intervals finished before the kill

    # The restored state is the saved one: members (weights, Adam moments, counters, hyperparameters) and PBT.
    config = load_config(ROOT / "configs" / "pbt_ppo_cartpole.yaml", [*PBT_TINY, "runtime.mode=serial"],
                         PBTConfig)
    hosts = SerialHosts(config)
    try:
        hosts.restore(saved["members"])
        for restored, member in zip(hosts.checkpoints(), saved["members"]):
            assert restored["version"] == member["version"] and restored["env_frames"] == member["env_frames"] == 512 * done
            assert restored["hyperparameters"] == member["hyperparameters"]
            assert restored["rng"] == member["rng"] and restored["episodes_count"] == member["episodes_count"]
            assert restored["arrays"].keys() == member["arrays"].keys()
            for name, array in member["arrays"].items():
                np.testing.assert_array_equal(restored["arrays"][name], array, err_msg=name)
    finally:
        hosts.close()
    pbt = make_pbt(config)
    pbt.load_state_dict(saved["pbt"])
    again = pbt.state_dict()
    for key in ("ids", "parent_ids", "hyperparameters", "last_scores"):
        np.testing.assert_array_equal(again[key], saved["pbt"][key], err_msg=key)
    assert again["next_id"] == saved["pbt"]["next_id"] and again["rng"] == saved["pbt"]["rng"]

    total = done + 2
    resumed = _evolve(tmp_path, "--resume", str(run), f"stop.total_env_frames={512 * total}", "runtime.mode=ray",
                      "runtime.num_workers=2")
    assert resumed.returncode == 0, resumed.stderr
    with open_run(run) as reader:
        assert reader.closed_cleanly and reader.meta["resumes"] == 1
        assert reader.meta["resumed_through_version"] == done - 1
        rows = reader.population()
        versions = reader.metric("best_return").policy_version
    np.testing.assert_array_equal(rows["generation"], np.repeat(np.arange(total), 4))
    np.testing.assert_array_equal(versions, np.arange(total))
    np.testing.assert_array_equal(rows["env_frames"], np.repeat(512 * np.arange(1, total + 1), 4))
    ids, parents = rows["id"].reshape(total, 4), rows["parent_ids"][:, 0].reshape(total, 4)
    _assert_lineage(ids, parents)
    # After the resume the members continue from the saved ones: the first resumed interval's ids
    # are the saved population's (a saved exploit was already applied).
    np.testing.assert_array_equal(ids[done], saved["pbt"]["ids"])
    assert ids.max() >= saved["pbt"]["next_id"] - 1
    assert len(set(rows["worker"][4 * done:].tolist())) == 2  # the resumed intervals ran on two Ray workers

    # Nothing left to do under the same budget: one clear line.
    assert main(["evolve", "--resume", str(run), f"stop.total_env_frames={512 * total}"]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and "larger budget" in lines[0], lines
