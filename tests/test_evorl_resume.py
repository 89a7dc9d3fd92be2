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
import pytest

from lamarckian_hpc.cli import main
from lamarckian_hpc.config import PBTConfig, load_config
from lamarckian_hpc.evorl.pbt_ppo import CHECKPOINT_KIND as PBT_KIND
from lamarckian_hpc.evorl.pbt_ppo import PBTProgram, make_pbt
from lamarckian_hpc.population.worker_pool import InProcessPool
from lamarckian_hpc.population.workflow import member_states, restore_members
from lamarckian_hpc.runtime.learner.checkpoint import checkpoint_path, load_run_state
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


@pytest.mark.second_pass
def test_killed_pbt_run_resumes_on_ray_after_its_last_interval(tmp_path, capsys):
    """A serial PBT run is SIGKILLed one interval after a checkpoint that is then put back (as after
    a kill between an interval's rows and its checkpoint); the restored members and PBT state equal
    the saved ones, and `evolve --resume` (on two Ray workers) drops the rows past the checkpoint and
    trains two intervals more, with every interval in the run file once."""
    run = tmp_path / "runs" / "pbt.h5"
    checkpoint = checkpoint_path(run)
    snapshot = tmp_path / "snapshot.ckpt"

    def one_interval_past_a_snapshot() -> bool:
        if not snapshot.exists():
            data = checkpoint.read_bytes()
            if load_run_state(checkpoint, PBT_KIND)["generation"] >= 2:
                snapshot.write_bytes(data)
            return False
        return load_run_state(checkpoint, PBT_KIND)["generation"] > load_run_state(snapshot, PBT_KIND)["generation"]

    _kill_after([sys.executable, "-m", "lamarckian_hpc", "evolve", str(ROOT / "configs" / "pbt_ppo_cartpole.yaml"),
                 *PBT_TINY, "runtime.mode=serial", "stop.total_env_frames=100000", "storage.run_name=pbt",
                 "storage.checkpoint_interval_seconds=0.001"],
                tmp_path, one_interval_past_a_snapshot)
    checkpoint.write_bytes(snapshot.read_bytes())
    saved = load_run_state(checkpoint, PBT_KIND)
    done = int(saved["generation"])  # intervals the checkpoint covers
    with open_run(run) as reader:
        assert reader.population()["generation"].max() >= done, "rows past the checkpoint to drop"

    # The restored state is the saved one: members (weights, Adam moments, counters, hyperparameters) and PBT.
    config = load_config(ROOT / "configs" / "pbt_ppo_cartpole.yaml", [*PBT_TINY, "runtime.mode=serial"],
                         PBTConfig)
    pool = InProcessPool(PBTProgram(config).host_factory(), 4)
    try:
        restore_members(pool, saved["members"])
        for restored, member in zip(member_states(pool, 4), saved["members"]):
            assert restored["version"] == member["version"]
            assert restored["env_frames"] == member["env_frames"] == 512 * done
            assert restored["hyperparameters"] == member["hyperparameters"]
            assert restored["rng"] == member["rng"] and restored["episodes_count"] == member["episodes_count"]
            assert restored["arrays"].keys() == member["arrays"].keys()
            for name, array in member["arrays"].items():
                np.testing.assert_array_equal(restored["arrays"][name], array, err_msg=name)
    finally:
        pool.close()
    pbt = make_pbt(config)
    pbt.load_state_dict(saved["program"]["pbt"])
    again = pbt.state_dict()
    for key in ("ids", "parent_ids", "hyperparameters", "last_scores"):
        np.testing.assert_array_equal(again[key], saved["program"]["pbt"][key], err_msg=key)
    assert again["next_id"] == saved["program"]["pbt"]["next_id"] and again["rng"] == saved["program"]["pbt"]["rng"]

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
    np.testing.assert_array_equal(ids[done], saved["program"]["pbt"]["ids"])
    assert ids.max() >= saved["program"]["pbt"]["next_id"] - 1
    assert len(set(rows["worker"][4 * done:].tolist())) == 2  # the resumed intervals ran on two Ray workers

    # Nothing left to do under the same budget, or another population: one clear line each.
    capsys.readouterr()
    for override, words in ((f"stop.total_env_frames={512 * total}", "larger budget"),
                            ("algorithm.population_size=6", "algorithm.population_size")):
        assert main(["evolve", "--resume", str(run), f"stop.total_env_frames={512 * (total + 1)}", override]) == 2
        lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(lines) == 1 and words in lines[0], lines


def _history(path: Path) -> tuple[dict[str, np.ndarray], dict, np.ndarray]:
    with open_run(path) as reader:
        assert reader.closed_cleanly
        return reader.population(), dict(reader.meta), reader.metric(reader.metric_names()[0]).policy_version


EMOGI_TINY = ["env.num_envs=2", "env.kwargs={points_to_win: 2}", "model.policy_hidden_sizes=[16]", "ppo.batch_size=256",
              "ppo.num_epochs=1", "algorithm.population_size=2", "algorithm.initial_env_frames=256",
              "algorithm.offspring_env_frames=256", "algorithm.evaluation_episodes=1", "runtime.mode=serial"]


def test_emogi_resumes_to_the_history_and_policies_of_an_uninterrupted_run(tmp_path, capsys):
    """Two generations, resumed to three, then resumed from the checkpoint of generation two again
    (as after a kill between writing generation three's rows and its checkpoint) to four: the run
    file ends as a straight four-generation run's, every generation once, with the same policies."""
    from lamarckian_hpc.ec import NSGA2
    from lamarckian_hpc.evorl.emogi import result_of
    from lamarckian_hpc.evorl.emogi_command import CHECKPOINT_KIND
    from lamarckian_hpc.evorl.emogi_store import read_results

    config_file = str(ROOT / "configs" / "emogi_pong.yaml")
    common = [config_file, *EMOGI_TINY, f"storage.directory={tmp_path}"]
    assert main(["evolve", *common, "algorithm.generations=4", "storage.run_name=straight"]) == 0
    assert main(["evolve", *common, "algorithm.generations=2", "storage.run_name=resumed"]) == 0
    run = tmp_path / "resumed.h5"
    checkpoint = checkpoint_path(run)
    after_two = checkpoint.read_bytes()

    # The saved state is the run's: its policies are those the finished run stored, and NSGA-II's
    # state survives a load.
    saved = load_run_state(checkpoint, CHECKPOINT_KIND)
    assert saved["generation"] == saved["program"]["generations"] == 2
    stored = read_results(run).policies
    restored = result_of(saved["program"])
    assert restored.policies.keys() == stored.keys() == {0, 1, 2, 3}
    for identifier, weights in stored.items():
        for name, array in weights.items():
            np.testing.assert_array_equal(restored.policies[identifier][name], array)
    nsga = NSGA2(np.zeros(2), np.ones(2), 2, np.random.default_rng(99))
    nsga.load_state_dict(saved["program"]["nsga"])
    again = nsga.state_dict()
    assert again["next_id"] == saved["program"]["nsga"]["next_id"] == 4
    assert again["rng"] == saved["program"]["nsga"]["rng"]
    for key, array in saved["program"]["nsga"]["population"].items():
        np.testing.assert_array_equal(again["population"][key], array, err_msg=key)

    assert main(["evolve", "--resume", str(run), "algorithm.generations=3"]) == 0
    checkpoint.write_bytes(after_two)
    assert main(["evolve", "--resume", str(run), "algorithm.generations=4"]) == 0
    straight, _, _ = _history(tmp_path / "straight.h5")
    history, meta, versions = _history(run)
    assert meta["resumes"] == 2 and meta["resumed_through_version"] == 1
    np.testing.assert_array_equal(versions, np.arange(4))
    np.testing.assert_array_equal(history["generation"], np.repeat(np.arange(4), 2))
    for column in ("id", "parent_ids", "genome", "objectives", "env_frames"):
        np.testing.assert_array_equal(history[column], straight[column], err_msg=column)
    policies, straight_policies = read_results(run).policies, read_results(tmp_path / "straight.h5").policies
    assert policies.keys() == straight_policies.keys() == set(range(8))
    for identifier, weights in straight_policies.items():
        for name, array in weights.items():
            np.testing.assert_array_equal(policies[identifier][name], array)

    capsys.readouterr()
    assert main(["evolve", "--resume", str(run), "algorithm.generations=4"]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and "larger budget" in lines[0], lines


def test_game_testing_search_resumes_to_the_history_and_bugs_of_an_uninterrupted_run(tmp_path, capsys):
    """60 episodes, resumed to 100, then resumed from the 60-episode checkpoint again to 120: the
    run file and the bug reports are those of a straight 120-episode search."""
    import json

    from lamarckian_hpc.evorl.game_testing_command import CHECKPOINT_KIND

    common = [str(ROOT / "configs" / "game_testing.yaml"), "algorithm.compare_random=false",
              f"storage.directory={tmp_path}", "storage.checkpoint_interval_seconds=0.000001"]
    assert main(["evolve", *common, "algorithm.episodes=120", "storage.run_name=straight"]) == 0
    assert main(["evolve", *common, "algorithm.episodes=60", "storage.run_name=resumed"]) == 0
    run = tmp_path / "resumed.h5"
    checkpoint = checkpoint_path(run)
    after_sixty = checkpoint.read_bytes()
    saved = load_run_state(checkpoint, CHECKPOINT_KIND)
    history, _, _ = _history(run)
    last = history["generation"] == saved["generation"] - 1
    assert saved["program"]["episodes"] == 60 and saved["generation"] == 3
    np.testing.assert_array_equal(saved["program"]["population"]["ids"], history["id"][last])
    np.testing.assert_array_equal(saved["program"]["population"]["genomes"], history["genome"][last])

    assert main(["evolve", "--resume", str(run), "algorithm.episodes=100"]) == 0
    checkpoint.write_bytes(after_sixty)
    assert main(["evolve", "--resume", str(run), "algorithm.episodes=120"]) == 0
    straight, _, straight_versions = _history(tmp_path / "straight.h5")
    history, meta, versions = _history(run)
    assert meta["resumes"] == 2 and meta["resumed_through_version"] == 2
    np.testing.assert_array_equal(versions, straight_versions)
    np.testing.assert_array_equal(versions, np.arange(6))
    for column in ("generation", "id", "parent_ids", "genome", "objectives"):
        np.testing.assert_array_equal(history[column], straight[column], err_msg=column)
    bugs = json.loads((tmp_path / "resumed.bugs.json").read_text())
    assert bugs["episodes"] == 120 and bugs["bugs"] == json.loads((tmp_path / "straight.bugs.json").read_text())["bugs"]
    assert bugs["distinct_states"] == json.loads((tmp_path / "straight.bugs.json").read_text())["distinct_states"]

    capsys.readouterr()
    assert main(["evolve", "--resume", str(run), "algorithm.episodes=120"]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and "larger budget" in lines[0], lines
