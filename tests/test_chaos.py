"""Faults injected for real into a job launched over the Slurm test cluster's 4 nodes (each its own
network namespace), as benchmarks/reliability/chaos.py does on 8: the relay of node2 killed, then
the learner stopped for longer than an actor waits before it asks for credit again. The run must
recover at once, keep its credits in flight within the budget and its experience fresh, finish
cleanly, and stay readable throughout."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from optional_parts import require_slurm

from benchmarks.reliability import chaos

ROOT = Path(__file__).resolve().parents[1]

#: Longer than `comm.channels.ASK_AGAIN_SECONDS`: every actor runs dry and asks again while the
#: learner is stopped, and the learner finds those requests queued when it continues.
STOP_SECONDS = 40.0


def _relay_kill_then_learner_stop(job_id: str, run: Path, hosts: int) -> chaos.Fault:
    start = time.monotonic()
    killed = chaos.relay_kill(job_id, run, hosts)
    time.sleep(10)
    stopped = chaos.learner_stop(job_id, run, hosts, seconds=STOP_SECONDS)
    return chaos.Fault(start, stopped.end, killed.injected + stopped.injected, {**killed.detail, **stopped.detail})


@pytest.mark.slow
@pytest.mark.second_pass
def test_a_killed_relay_and_a_stopped_learner_leave_flow_control_and_staleness_as_they_were(tmp_path):
    require_slurm(4)
    from lamarckian_hpc.comm.channels import ASK_AGAIN_SECONDS

    assert STOP_SECONDS > ASK_AGAIN_SECONDS
    case = chaos.Case("relay of node2 killed, then the learner stopped", (), 10.0 + STOP_SECONDS,
                      _relay_kill_then_learner_stop)
    row = chaos.chaos_run(tmp_path, "relay_kill_learner_stop", 4, case=case, after_seconds=30.0, warm_version=5)
    detail = row["detail"]
    assert row["finished"], row                        # launch exited 0, the run file closed cleanly
    assert row["file_reads"] > 30 and row["file_read_failures"] == 0, row
    assert row["first_update_after_s"] is not None and row["first_update_after_s"] < 10, row
    assert row["longest_update_gap_after_s"] < 10, row
    # Flow control holds: the ledger counts no more than its budget, and nothing it wrote off stays in
    # circulation (the experience would then stay older than before, as it once did).
    assert row["credits_in_flight_max_after"] <= row["credit_budget"], row
    assert row["staleness_under_2_after_s"] is not None and row["staleness_under_2_after_s"] < 60, row
    assert row["staleness_mean_after"] < 1.5, row
    assert detail["updates_after_fault"] >= 20, row
    assert row["credits_late"] <= row["credits_written_off"], row  # a late message was written off first
