"""Learner ranks: N processes with B/N steps each make the update of one learner with B.

Real gloo groups of spawned processes on 127.0.0.1 (one spawn of four processes serves every
check: a group of four, then two groups of two), each rank training on its own shard of a fixed
batch, against one learner in this process on the shards laid end to end. The update equals it
within 1e-5 (float sums in another order), while it moves the weights by far more.
"""

from __future__ import annotations

import multiprocessing
import socket
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from learner_ranks import CASES, case_config, case_spaces, global_batch, learn, run_rank

from lamarckian_hpc.config import ConfigError, load_config
from lamarckian_hpc.runtime.algorithms import make_learner
from lamarckian_hpc.runtime.learner.group import (
    LearnerGroupError,
    LearnerGroupSpec,
    form_group,
    free_port,
    interface_of,
    local_address_toward,
)

TOLERANCE = 1e-5
MISSING_RANK_TIMEOUT = 2.0


@pytest.fixture(scope="module")
def ranks_ran(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run every group once; the folder of what the ranks wrote."""
    out = tmp_path_factory.mktemp("ranks")
    ports = [free_port("127.0.0.1") for _ in range(5)]
    jobs: list[list[dict]] = [[{"rank": process, "world_size": 4, "port": ports[0],
                                "cases": ["ppo_mlp_4", "ppo_mlp_4_uneven"]}] for process in range(4)]
    for process in (0, 1):
        jobs[process] += [{"rank": process, "world_size": 2, "port": ports[1], "cases": ["ppo_mlp_2", "ppo_cnn_2"]},
                          {"rank": process, "world_size": 2, "port": ports[3], "missing_rank": True,
                           "timeout": MISSING_RANK_TIMEOUT}]
    for process in (2, 3):
        jobs[process] += [{"rank": process - 2, "world_size": 2, "port": ports[2],
                           "cases": ["impala_2", "impala_2_empty", "impala_2_nan"]},
                          {"rank": process - 2, "world_size": 2, "port": ports[4], "dead_rank": True,
                           "timeout": MISSING_RANK_TIMEOUT}]
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=run_rank, args=(jobs[process], str(out))) for process in range(4)]
    for process in processes:
        process.start()
    deadline = time.monotonic() + 120
    for process in processes:
        process.join(max(deadline - time.monotonic(), 1))
    alive = [index for index, process in enumerate(processes) if process.is_alive()]
    for process in processes:
        if process.is_alive():
            process.kill()
    errors = "\n".join(path.read_text() for path in sorted(out.glob("error-*.txt")))
    assert not alive and not errors, f"ranks {alive} still running after 120 s; errors:\n{errors}"
    assert all(process.exitcode == 0 for process in processes), [process.exitcode for process in processes]
    return out


def _load(path: Path) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    with np.load(path) as stored:
        weights = {key[2:]: stored[key] for key in stored.files if key.startswith("w/")}
        diagnostics = {key[2:]: float(stored[key]) for key in stored.files if key.startswith("d/")}
    return weights, diagnostics


@pytest.mark.parametrize("name", sorted(CASES))
def test_ranks_make_the_update_of_one_learner(ranks_ran: Path, name: str) -> None:
    """Every rank ends with the one learner's weights (within 1e-5) and reports its diagnostics;
    the update moved the weights far more than that."""
    world = len(CASES[name]["shards"])
    expected_weights, expected_diagnostics = learn(name, global_batch(name))
    start = make_learner(case_config(name), *case_spaces(name)).weights()
    moved = max(float(np.abs(expected_weights[key] - start[key]).max()) for key in start)
    assert moved > 100 * TOLERANCE, f"the update moved the weights by {moved} only: nothing to compare"
    for rank in range(world):
        weights, diagnostics = _load(ranks_ran / f"{name}-{rank}.npz")
        difference = max(float(np.abs(weights[key] - expected_weights[key]).max()) for key in expected_weights)
        print(f"{name} rank {rank}/{world}: max weight difference {difference:.3g} (update moved {moved:.3g})")
        assert difference <= TOLERANCE, f"{name} rank {rank}: weights differ by {difference}"
        assert sorted(diagnostics) == sorted(expected_diagnostics)
        for key, value in expected_diagnostics.items():
            assert diagnostics[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key
        if rank:  # every rank gets the same diagnostics, and the same weights, bit for bit
            first_weights, first_diagnostics = _load(ranks_ran / f"{name}-0.npz")
            assert diagnostics == first_diagnostics
            assert all(np.array_equal(weights[key], first_weights[key]) for key in weights)
    assert expected_diagnostics["staleness_max"] == 3
    assert (expected_diagnostics["nonfinite_steps"] > 0) == ("nan" in CASES[name]), expected_diagnostics


def test_a_rank_missing_from_a_collective_is_named_within_the_timeout(ranks_ran: Path) -> None:
    elapsed, message, ranks = (ranks_ran / "missing_rank.txt").read_text().splitlines()
    assert ranks == "(1,)", message
    assert "learner rank 0 of 2" in message and "rank(s) 1 (" in message and "127.0.0.1" in message, message
    # The collective's timeout, then at most half of it waiting for the others to say where they are.
    assert MISSING_RANK_TIMEOUT * 0.9 <= float(elapsed) <= MISSING_RANK_TIMEOUT * 1.5 + 1.0, elapsed


def test_a_rank_that_dies_is_named_within_the_timeout(ranks_ran: Path) -> None:
    elapsed, message, ranks = (ranks_ran / "dead_rank.txt").read_text().splitlines()
    assert ranks == "(1,)", message
    assert "learner rank 0 of 2" in message and "all_gather_counts" in message and "rank(s) 1 (" in message, message
    assert float(elapsed) <= MISSING_RANK_TIMEOUT * 1.5 + 1.0, elapsed


@pytest.mark.parametrize("algorithm", ["dqn", "sac", "a3c"])
def test_several_learners_only_for_algorithms_that_support_them(algorithm: str) -> None:
    overrides = [f"algorithm.name={algorithm}", "runtime.learners=2"]
    if algorithm == "sac":
        overrides.append("env.id=Pendulum-v1")
    with pytest.raises(ConfigError, match=r"runtime.learners: 2 learner ranks learn with ppo or impala; "
                                          rf"algorithm.name '{algorithm}' learns on one"):
        load_config(None, overrides)
    assert load_config(None, ["algorithm.name=impala", "runtime.learners=4"]).runtime.learners == 4


def test_several_learners_refused_for_serial_runs() -> None:
    with pytest.raises(ConfigError, match="runtime.learners: 2 learner ranks are processes of runtime.mode=ray"):
        load_config(None, ["runtime.learners=2", "runtime.mode=serial"])


def test_gloo_binds_the_interface_that_holds_the_address(ranks_ran: Path) -> None:
    """The ranks' sockets go on the interface of the rendezvous' route (the loopback here only
    because the address is a loopback one); any other address is found on its own interface."""
    assert {path.read_text() for path in ranks_ran.glob("interface-*.txt")} == {interface_of("127.0.0.1")}
    for name, addresses in psutil.net_if_addrs().items():
        for entry in addresses:
            if entry.family == socket.AF_INET and not entry.address.startswith("127."):
                assert interface_of(entry.address) == name
                assert local_address_toward(entry.address) == entry.address


@pytest.mark.parametrize("rank", [0, 1])
def test_a_rendezvous_nobody_joins_fails_within_the_timeout(rank: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 0 alone names rank 1 as missing; rank 1 alone names rank 0, whose store never answers."""
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "unset")  # form_group sets it; restored after the test
    spec = LearnerGroupSpec(rank, 2, "127.0.0.1", free_port("127.0.0.1"), "gloo", timeout_seconds=1.0)
    started = time.monotonic()
    with pytest.raises(LearnerGroupError, match=rf"learner rank {rank} of 2 .*{1 - rank}.*tcp://127.0.0.1:{spec.port}") \
            as error:
        form_group(spec)
    assert error.value.ranks == (1 - rank,) and "\n" not in str(error.value)
    assert time.monotonic() - started < 5.0


def test_several_learners_refused_for_multiagent_runs() -> None:
    config = Path(__file__).resolve().parent.parent / "configs" / "multiagent_async_arena.yaml"
    assert load_config(config).runtime.learners == 1
    with pytest.raises(ConfigError, match="runtime.learners: 2 learner ranks train one policy; a multiagent run "
                                          "takes runtime.learners: 1"):
        load_config(config, ["runtime.learners=2"])
