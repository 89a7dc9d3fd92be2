"""PBT: exploit and explore against hand-worked cases, lineage through copies, and PBT+PPO on
CartPole-v1 with four learners on Ray writing every member's history to the run file."""

from __future__ import annotations

import numpy as np
import pytest

from lamarckian_hpc.cli import main
from lamarckian_hpc.config import ConfigError, PBTConfig, load_config
from lamarckian_hpc.ec.pbt import PBT, Hyperparameter, perturb, resample, truncation_sources, ttest_sources
from lamarckian_hpc.storage import open_run

SPACE = [Hyperparameter("learning_rate", 1e-5, 0.1, log=True), Hyperparameter("value_weight", 0.01, 1.0)]


def test_truncation_bottom_quarter_copies_top_quarter():
    rng = np.random.default_rng(0)
    assert truncation_sources(np.array([1.0, 5.0, 3.0, 2.0]), 0.25, rng).tolist() == [1, -1, -1, -1]
    # Half: slots 0 and 3 (scores 1, 2) each copy one of slots 1 and 2 (scores 5, 3).
    sources = truncation_sources(np.array([1.0, 5.0, 3.0, 2.0]), 0.5, rng)
    assert sources[1] == sources[2] == -1 and set(sources[[0, 3]]) <= {1, 2}
    # A member without a finished episode (NaN) ranks last.
    assert truncation_sources(np.array([4.0, np.nan, 3.0, 9.0]), 0.25, rng).tolist() == [-1, 3, -1, -1]
    # Fewer members than one per quarter: nobody copies.
    assert truncation_sources(np.array([1.0, 2.0, 3.0]), 0.25, rng).tolist() == [-1, -1, -1]


def test_ttest_copies_only_a_significantly_better_member():
    rng = np.random.default_rng(0)
    worse, better = np.array([10.0, 12.0, 11.0, 9.0, 10.0]), np.array([100.0, 110.0, 95.0, 105.0, 99.0])
    assert ttest_sources([worse, better], 0.05, rng).tolist() == [1, -1]
    # Higher mean but not significant (overlapping noisy samples): keep.
    noisy = np.array([5.0, 30.0, 2.0, 25.0, 4.0])
    assert ttest_sources([np.array([10.0, 12.0, 14.0, 9.0, 11.0]), noisy], 0.05, rng).tolist() == [-1, -1]
    # One sample is not enough for a t-test.
    assert ttest_sources([np.array([1.0]), better], 0.05, rng).tolist() == [-1, -1]


def test_perturb_multiplies_and_clips_to_the_interval():
    rng = np.random.default_rng(0)
    assert np.allclose(perturb(np.array([0.01, 0.5]), SPACE, (1.2, 1.2), rng), [0.012, 0.6])
    assert np.allclose(perturb(np.array([0.09, 0.95]), SPACE, (1.2, 1.2), rng), [0.1, 1.0])
    assert np.allclose(perturb(np.array([1e-5, 0.011]), SPACE, (0.8, 0.8), rng), [1e-5, 0.01])
    values = np.array([perturb(np.array([0.01, 0.5]), SPACE, (0.8, 1.2), rng) for _ in range(200)])
    assert set(np.round(values[:, 0], 6)) == {0.008, 0.012} and set(np.round(values[:, 1], 6)) == {0.4, 0.6}


def test_resample_is_log_uniform_on_a_log_scale():
    rng = np.random.default_rng(0)
    draws = np.array([resample(SPACE, rng) for _ in range(4000)])
    assert draws[:, 0].min() >= 1e-5 and draws[:, 0].max() <= 0.1
    # log-uniform on [1e-5, 1e-1]: median 1e-3; a uniform draw would have median 0.05.
    assert 5e-4 < np.median(draws[:, 0]) < 2e-3
    assert 0.45 < np.median(draws[:, 1]) < 0.56


def test_tell_copies_with_lineage_and_explores_only_the_copies():
    pbt = PBT(SPACE, 4, np.random.default_rng(1), exploit="truncation", explore="perturb", resample_probability=0.0)
    before = pbt.ask()
    sources = pbt.tell(np.array([1.0, 5.0, 3.0, 2.0]))
    assert sources.tolist() == [1, -1, -1, -1]
    assert pbt.ids.tolist() == [4, 1, 2, 3] and pbt.parent_ids.tolist() == [1, -1, -1, -1]
    after = pbt.ask()
    assert np.array_equal(after[1:], before[1:])
    ratios = after[0] / before[1]
    assert all(np.isclose(r, 0.8) or np.isclose(r, 1.2) or v in (1e-5, 0.1, 0.01, 1.0)
               for r, v in zip(ratios, after[0]))
    # Next interval the copy (id 4) is best and slot 3 worst: the new member 5 descends from 4.
    pbt.tell(np.array([9.0, 5.0, 3.0, 2.0]))
    assert pbt.ids.tolist() == [4, 1, 2, 5] and pbt.parent_ids.tolist() == [1, -1, -1, 4]
    population = pbt.population()
    assert population[3].parent_ids == (4, -1) and population[1].objectives.tolist() == [-5.0]


def test_resample_explore_and_no_exploit():
    pbt = PBT(SPACE, 4, np.random.default_rng(2), exploit="none")
    assert pbt.tell(np.array([1.0, 5.0, 3.0, 2.0])).tolist() == [-1, -1, -1, -1]
    assert pbt.ids.tolist() == [0, 1, 2, 3]
    pbt = PBT(SPACE, 4, np.random.default_rng(2), explore="resample")
    before = pbt.ask()
    pbt.tell(np.array([1.0, 5.0, 3.0, 2.0]))
    after = pbt.ask()
    assert not np.isclose(after[0] / before[1], 0.8).any() and not np.isclose(after[0] / before[1], 1.2).any()


def test_ttest_exploit_uses_the_episode_returns_told():
    pbt = PBT(SPACE, 2, np.random.default_rng(0), exploit="ttest")
    sources = pbt.tell(np.array([10.0, 100.0]), [np.array([9.0, 10.0, 11.0, 10.0]), np.array([99.0, 101.0, 100.0])])
    assert sources.tolist() == [1, -1] and pbt.parent_ids.tolist() == [1, -1] and pbt.scores[0] == []


def test_hyperparameter_intervals_are_checked():
    with pytest.raises(ValueError, match="log-scale interval needs low > 0"):
        Hyperparameter("learning_rate", 0.0, 0.1, log=True)
    with pytest.raises(ConfigError, match=r"algorithm.hyperparameters.learning_rate: log scale needs low > 0"):
        load_config(None, ["algorithm.hyperparameters={learning_rate: {low: 0, high: 0.1, log: true}}"], PBTConfig)
    with pytest.raises(ConfigError, match=r"algorithm.hyperparameters.clip_range"):
        load_config(None, ["algorithm.hyperparameters={clip_range: {low: 0.1, high: 0.3}}"], PBTConfig)


@pytest.mark.second_pass
def test_pbt_ppo_on_cartpole_records_every_member_and_its_lineage(tmp_path):
    """Four PPO learners on two Ray workers, 3 intervals of 2,048 frames each, with 20 epochs of 4
    minibatches per update; the best member must reach a mean return of 120 (here it scored 173
    after those 6,144 frames)."""
    status = main(["evolve", "configs/pbt_ppo_cartpole.yaml", f"storage.directory={tmp_path}", "storage.run_name=pbt",
                   "runtime.mode=ray", "runtime.num_workers=2", "algorithm.interval_env_frames=2048",
                   "stop.total_env_frames=6144", "stop.target_return=null", "algorithm.truncation_fraction=0.5",
                   "ppo.num_epochs=20", "ppo.num_minibatches=4"])
    assert status == 0
    with open_run(tmp_path / "pbt.h5") as run:
        assert run.closed_cleanly
        rows = run.population()
        names = run.genome_names()
        columns = run.genome_columns()
        best = run.metric("best_return")
    assert names == ["learning_rate", "value_weight", "entropy_weight"]
    intervals = 3
    assert len(rows["id"]) == 4 * intervals and rows["generation"].tolist() == [g for g in range(intervals) for _ in range(4)]
    assert (rows["env_frames"].reshape(intervals, 4) == 2048 * np.arange(1, intervals + 1)[:, None]).all()
    assert (rows["wall_time"] > 0).all() and len(set(rows["worker"].tolist())) == 2
    assert 1e-5 <= columns["learning_rate"].min() and columns["learning_rate"].max() <= 0.1
    assert 0.01 <= columns["value_weight"].min() and columns["value_weight"].max() <= 1.0
    # Lineage: half the population copies every interval, and each copy's parent was a member of
    # the interval before; the other members keep their ids and parents.
    ids, parents = rows["id"].reshape(intervals, 4), rows["parent_ids"][:, 0].reshape(intervals, 4)
    assert ids[0].tolist() == [0, 1, 2, 3] and (parents[0] == -1).all()
    for interval in range(1, intervals):
        new = ~np.isin(ids[interval], ids[interval - 1])
        assert new.sum() == 2
        assert np.isin(parents[interval][new], ids[interval - 1]).all()
        kept = ~new
        assert (ids[interval][kept] == ids[interval - 1][kept]).all()
        assert (parents[interval][kept] == parents[interval - 1][kept]).all()
    assert len(best) == intervals
    best_score = np.nanmax(rows["objectives"][:, 0])
    print(f"best score {best_score:.1f}")
    assert best_score >= 120


TINY = ["env.num_envs=4", "ppo.num_epochs=2", "model.policy_hidden_sizes=[16]", "algorithm.interval_env_frames=512",
        "algorithm.truncation_fraction=0.5", "stop.target_return=null", "stop.total_env_frames=1536"]


def _history(overrides: list[str]) -> list:
    """Per interval: every member's score, id and hyperparameters."""
    from lamarckian_hpc.evorl import run_pbt

    config = load_config("configs/pbt_ppo_cartpole.yaml", TINY + overrides, PBTConfig)
    history: list = []
    run_pbt(config, on_interval=lambda report: history.append((report.scores.tolist(), report.ids.tolist(),
                                                                report.hyperparameters)))
    return history


def _fork_pool(config: PBTConfig):
    from lamarckian_hpc.evorl.pbt_ppo import PBTProgram
    from lamarckian_hpc.population.worker_pool import make_pool

    program = PBTProgram(config)
    return program, make_pool("fork", program.host_factory(), config.algorithm.population_size,
                              config.runtime.num_workers, config.runtime.timeout_seconds)


def test_forked_workers_train_as_this_process_does_and_end_with_the_run():
    """One forked worker holding the whole population trains it bitwise as the serial layout does
    (same members, same order, so the same random streams), with copies and explores going over the
    pipes; two workers train two slots each in their own processes, move checkpoints (128-bit
    generator states included) both ways, and are gone after close."""
    import os

    from lamarckian_hpc.population.workflow import member_states, restore_members

    serial = _history(["runtime.mode=serial"])
    forked = _history(["runtime.mode=fork", "runtime.num_workers=1"])
    assert forked == serial and len(serial) == 3

    config = load_config("configs/pbt_ppo_cartpole.yaml", TINY + ["runtime.mode=fork", "runtime.num_workers=2"],
                         PBTConfig)
    program, pool = _fork_pool(config)
    try:
        assert len(set(pool.pids)) == 2 and os.getpid() not in pool.pids
        results = sorted((r for batch in pool.each_worker("train_interval", 512, False, None) for r in batch),
                         key=lambda r: r["slot"])
        assert [r["slot"] for r in results] == [0, 1, 2, 3] and all(r["env_frames"] == 512 for r in results)
        saved = member_states(pool, 4)
        assert program._exploit(pool, np.array([-1, 0, -1, 2])) == 2  # slot 1 becomes slot 0, slot 3 slot 2
        copied = member_states(pool, 4)
        for name, array in saved[0]["arrays"].items():
            if name.startswith("model/"):
                np.testing.assert_array_equal(copied[1]["arrays"][name], array)
        restore_members(pool, saved)
        restored = member_states(pool, 4)
        assert [s["rng"] for s in restored] == [s["rng"] for s in saved] and saved[0]["rng"]["state"]["state"] > 2**64
        for before, after in zip(saved, restored):
            for name, array in before["arrays"].items():
                np.testing.assert_array_equal(after["arrays"][name], array, err_msg=name)
    finally:
        pool.close()
    assert all(not process.is_alive() for process in pool.processes)


@pytest.mark.parametrize("fault", ["hung", "killed"])
def test_a_hung_or_dead_forked_worker_ends_the_wait_with_its_name(fault):
    """One stuck worker must not hang the driver: a silent one past runtime.timeout_seconds, or one
    that died, is reported with its pid and slots, and a fresh worker takes its place."""
    import contextlib
    import os
    import signal
    import time

    from lamarckian_hpc.population.worker_pool import WorkerError
    from lamarckian_hpc.population.workflow import member_states

    config = load_config("configs/pbt_ppo_cartpole.yaml",
                         TINY + ["runtime.mode=fork", "runtime.num_workers=2", "runtime.timeout_seconds=2"],
                         PBTConfig)
    _, pool = _fork_pool(config)
    victim = pool.processes[1].pid
    try:
        os.kill(victim, signal.SIGSTOP if fault == "hung" else signal.SIGKILL)
        started = time.monotonic()
        expected = "sent no answer within 2 s" if fault == "hung" else "died"
        with pytest.raises(WorkerError, match=rf"worker {victim} \(slots \[1, 3\]\), checkpoints: {expected}"):
            member_states(pool, 4)
        assert time.monotonic() - started < 10
        assert pool.processes[1].pid != victim and pool.processes[1].is_alive() and pool.replacements == 1
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGKILL)
        pool.close()


def test_members_of_a_lost_worker_resume_on_a_fresh_one_and_the_run_goes_on(tmp_path):
    """A worker killed between intervals (its node left the run, or died): the pool puts a fresh
    worker in its place, its members resume there from the end of the last interval, and the run
    finishes every interval with every member, none lost or started afresh."""
    import os
    import signal

    from lamarckian_hpc.population.workflow import member_states, run_population

    config = load_config("configs/pbt_ppo_cartpole.yaml", TINY + ["runtime.mode=fork", "runtime.num_workers=2"],
                         PBTConfig)
    program, pool = _fork_pool(config)
    killed, lines, states = [], [], {}

    class KillAWorker:
        def on_generation_end(self, report) -> None:
            states[report.generation] = member_states(pool, 4)
            if report.generation == 0:
                killed.append(pool.processes[1].pid)
                os.kill(killed[0], signal.SIGKILL)

    try:
        run_population(program, config.runtime, report=lines.append, pool=pool, observers=[KillAWorker()])
        assert pool.replacements == 1 and pool.processes[1].pid != killed[0]
    finally:
        pool.close()
    assert program.interval == 3 and all(frames >= 1536 for frames in program.member_frames)
    assert any("worker 1 (slots [1, 3]) was lost" in line for line in lines), lines
    # The lost worker's members went on from where the first interval left them, not from scratch:
    # their frames and versions continued across the loss.
    for slot in (1, 3):
        assert states[1][slot]["env_frames"] > states[0][slot]["env_frames"] >= 512
        assert states[1][slot]["version"] > states[0][slot]["version"] > 0
