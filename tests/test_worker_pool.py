"""The one worker pool every population algorithm runs on: answers arrive as they finish, a request
pinned to a worker is answered there, a request that raises answers a failure and the worker goes
on, a worker that dies or hangs is replaced by a fresh host, and forked workers get and give plain
data over pipes in the wire format (nothing pickled)."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

from lamarckian_hpc.population.worker_pool import (
    InProcessPool,
    Request,
    WorkerError,
    WorkerFailure,
    assign_slots,
    make_pool,
)


class Host:
    """A host that sleeps, answers with its pid and slots, doubles arrays or fails on request."""

    def __init__(self, slots: list[int]) -> None:
        self.slots = slots
        self.calls = 0

    def work(self, seconds: float, label: str) -> dict:
        self.calls += 1
        time.sleep(seconds)
        return {"label": label, "pid": os.getpid(), "slots": self.slots, "calls": self.calls}

    def double(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {name: 2 * array for name, array in arrays.items()}

    def fail(self) -> None:
        raise RuntimeError("this request fails")

    def die(self) -> None:
        os.kill(os.getpid(), signal.SIGKILL)


def test_slots_go_round_robin():
    assert assign_slots(5, 2) == [[0, 2, 4], [1, 3]]
    assert assign_slots(2, 3) == [[0], [1], []]


def test_forked_answers_arrive_as_they_finish_and_pinned_requests_stay_on_their_worker():
    pool = make_pool("fork", Host, 4, 2, None)
    try:
        assert pool.slots == [[0, 2], [1, 3]] and len(set(pool.pids)) == 2 and os.getpid() not in pool.pids
        order = [index for index, _ in pool.run([Request("work", (1.0, "slow"), 0), Request("work", (0.0, "a"), 1),
                                                 Request("work", (0.0, "b"), 1)])]
        assert order == [1, 2, 0]  # the slow one does not hold up the other worker's answers
        answers = pool.gather([Request("work", (0.0, str(k)), k % 2) for k in range(4)])
        assert [a["pid"] for a in answers] == [pool.pids[0], pool.pids[1]] * 2
        assert [a["slots"] for a in answers[:2]] == [[0, 2], [1, 3]]
        # Free requests keep both workers busy: four 0.3 s requests take about 0.6 s on two workers.
        start = time.monotonic()
        free = pool.gather([Request("work", (0.3, str(k))) for k in range(4)])
        assert time.monotonic() - start < 1.1 and {a["pid"] for a in free} == set(pool.pids)
        arrays = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "big": np.ones(1 << 16)}
        doubled = pool.gather([Request("double", (arrays,), 1)])[0]
        np.testing.assert_array_equal(doubled["w"], 2 * arrays["w"])
        assert doubled["w"].dtype == np.float32 and doubled["big"].shape == (1 << 16,)
    finally:
        pool.close()
    assert all(not process.is_alive() for process in pool.processes)


@pytest.mark.parametrize("mode", ["serial", "fork"])
def test_a_failing_request_answers_a_failure_and_the_worker_goes_on(mode):
    pool = make_pool(mode, Host, 0, 2, None)
    try:
        answers = dict(pool.run([Request("fail"), Request("work", (0.0, "ok")), Request("_private")]))
        assert isinstance(answers[0], WorkerFailure) and "RuntimeError: this request fails" in answers[0].reason
        assert not answers[0].replaced and answers[1]["label"] == "ok"
        assert isinstance(answers[2], WorkerFailure) and "not a method" in answers[2].reason
        with pytest.raises(WorkerError, match="fail: RuntimeError: this request fails"):
            pool.gather([Request("fail")])
        assert pool.replacements == 0
    finally:
        pool.close()


@pytest.mark.parametrize("fault", ["died", "hung"])
def test_a_dead_or_hung_forked_worker_is_replaced_and_the_others_go_on(fault):
    pool = make_pool("fork", Host, 0, 2, 2.0)
    first = list(pool.pids)
    try:
        request = Request("die") if fault == "died" else Request("work", (60.0, "hangs"))
        start = time.monotonic()
        answers = dict(pool.run([request, Request("work", (0.0, "a")), Request("work", (0.0, "b"))]))
        assert time.monotonic() - start < 10
        failure = answers[0]
        assert isinstance(failure, WorkerFailure) and failure.replaced
        assert ("died" if fault == "died" else "sent no answer within 2 s") in failure.reason
        assert answers[1]["label"] == "a" and answers[2]["label"] == "b"
        assert pool.replacements == 1 and pool.pids[failure.worker] != first[failure.worker]
        again = pool.gather([Request("work", (0.0, "fresh"), failure.worker)])[0]
        assert again["calls"] == 1 and again["pid"] == pool.pids[failure.worker]  # a fresh host
    finally:
        pool.close()


def test_an_object_that_is_not_plain_data_does_not_cross_the_pipe():
    pool = make_pool("fork", Host, 0, 1, 5.0)
    try:
        with pytest.raises(TypeError):
            pool.gather([Request("double", ({"w": object()},))])
    finally:
        pool.close()


def test_the_in_process_pool_hosts_every_slot_here():
    pool = InProcessPool(Host, 3)
    try:
        answer = pool.gather([Request("work", (0.0, "here"), 0)])[0]
        assert answer["pid"] == os.getpid() and answer["slots"] == [0, 1, 2] and pool.worker_of(2) == 0
    finally:
        pool.close()
