"""A node joins a running run and leaves it, on one machine: the run's own Ray is the learner's
cluster, and a second real Ray node joins it through the run's join folder, as an actor job's node
does (`cluster.actor_job.join_run`, here in a thread of the test instead of a Slurm task). The
Slurm form of the same (actor jobs in another partition, scancel, a killed node, a requeued
learner) is in tests/test_actor_jobs.py."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from local_ray import joining_node, local_ray  # noqa: E402

from lamarckian_hpc.cluster.discovery import ADDRESS_ENV  # noqa: E402
from lamarckian_hpc.comm.credits import CreditLedger  # noqa: E402
from lamarckian_hpc.config import load_config  # noqa: E402
from lamarckian_hpc.runtime.observers import TrainResult, UpdateReport  # noqa: E402
from lamarckian_hpc.storage.join_folder import JoinFolder, JoinFolderError, RunContact  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CARTPOLE = ROOT / "configs" / "ppo_cartpole.yaml"


class Enough(Exception):
    """The node joined, was trained on, left, and the run went on without it for a while."""


class LeaveAfterJoined:
    """Records every update; once the joined node's actors have all said hello and sampled for
    `serve_seconds`, tells the node to leave, and ends the run `after_seconds` after the learner
    let it go."""

    def __init__(self, leave: threading.Event, serve_seconds: float, after_seconds: float) -> None:
        self.leave, self.serve_seconds, self.after_seconds = leave, serve_seconds, after_seconds
        self.reports: list[UpdateReport] = []
        self.joined_at: float | None = None
        self.leave_at: float | None = None
        self.gone_at: float | None = None  # the run's wall time when the node was let go

    def on_update_end(self, report: UpdateReport) -> None:
        self.reports.append(report)
        now = time.monotonic()
        if report.metrics["actors_connected"] == 3 and self.joined_at is None:  # the run's own and the node's 2
            self.joined_at = now
        if self.joined_at is not None and self.leave_at is None and now - self.joined_at > self.serve_seconds:
            self.leave_at = now
            self.leave.set()
        if self.leave_at is not None and self.gone_at is None and report.metrics["joined_nodes"] == 0:
            self.gone_at = report.wall_time
        if self.gone_at is not None and report.wall_time - self.gone_at > self.after_seconds:
            raise Enough

    def on_train_end(self, result: TrainResult) -> None:
        pass


@pytest.mark.second_pass  # a second Ray node on two cores: about 40 s
def test_a_node_joins_a_running_run_is_trained_on_and_leaves_with_its_credits_back(tmp_path, monkeypatch):
    from lamarckian_hpc.runtime.runners.distributed import DistributedTrainer  # Ray: the test extra has none

    monkeypatch.setenv(ADDRESS_ENV, "127.0.0.1")  # both Ray nodes of this machine on loopback
    folder = JoinFolder(tmp_path / "run.join")
    leave = threading.Event()
    watcher = LeaveAfterJoined(leave, serve_seconds=6.0, after_seconds=3.0)
    with local_ray(num_cpus=1):
        joiner, outcome = joining_node(folder, tmp_path, leave, leave_seconds=15)
        joiner.start()
        config = load_config(CARTPOLE, ["runtime.mode=ray", "runtime.num_actors=1", "runtime.planned_actors=3",
                                        f"runtime.join_folder={folder.path}", "stop.total_env_steps=10000000",
                                        "stop.max_wall_seconds=90", "stop.target_return=null"])
        trainer = DistributedTrainer(config, [watcher])
        try:
            with pytest.raises(Enough):
                trainer.train()
            joined_sequences = {index: sent for index, sent in trainer.next_sequence.items() if index >= 1}
            ledger = trainer.receiver.ledger
            budget, in_flight, accounts = ledger.budget, ledger.in_flight, len(ledger.accounts)
        finally:
            trainer.close()
            leave.set()
            joiner.join(timeout=30)
    assert outcome.get("ended") == "left", outcome
    assert watcher.leave_at is not None, "the joined node's actors never trained"
    joined = [r for r in watcher.reports if r.metrics["joined_actors"] > 0]
    assert max(r.metrics["actors_connected"] for r in joined) == 3  # the run's own actor and the node's 2
    # The joined actors' experience reached the learner: each sent numbered messages that arrived.
    assert len(joined_sequences) == 2 and min(joined_sequences.values()) > 5, joined_sequences
    after = [r for r in watcher.reports if r.wall_time >= watcher.gone_at]
    assert len(after) > 3 and all(r.metrics["joined_nodes"] == 0 and r.metrics["actors_connected"] == 1 for r in after)
    assert folder.was_let_go(outcome["node"])
    assert max(r.metrics["lost_messages"] for r in watcher.reports) == 0
    assert max(r.metrics["credits_in_flight"] for r in watcher.reports) <= budget
    assert in_flight <= budget and accounts == 1  # the joined actors' accounts are closed


def test_a_closed_credit_account_returns_its_credits_and_is_never_granted_again():
    ledger = CreditLedger(budget=4)
    ledger.want((b"r", b"a"), window=3)
    ledger.want((b"r", b"b"), window=3)
    grants = dict((route, count) for route, count, _ in ledger.grants())
    assert grants[(b"r", b"a")] + grants[(b"r", b"b")] == 4
    held = ledger.accounts[(b"r", b"a")].outstanding
    assert ledger.close((b"r", b"a")) == held
    assert ledger.in_flight == 4 - held and ledger.written_off == held
    regranted = ledger.grants()
    assert all(route == (b"r", b"b") for route, _, _ in regranted)  # its credits go to the one left
    ledger.spend((b"r", b"a"), 1)  # a message it sent before it left, arriving late
    assert ledger.uncredited == 1 and (b"r", b"a") not in ledger.accounts


def test_a_join_folder_keeps_its_token_private_and_refuses_one_others_can_read(tmp_path):
    folder = JoinFolder(tmp_path / "run.join")
    contact = RunContact("10.0.0.1:6379", "secret", "g1", "12", str(tmp_path / "run.h5"), 0.0)
    folder.publish(contact)
    assert (folder.path / "contact.json").stat().st_mode & 0o777 == 0o600
    assert folder.path.stat().st_mode & 0o777 == 0o700
    assert folder.contact() == contact
    folder.announce_leaving("node2-job7")
    assert folder.leaving() == ["node2-job7"]
    folder.mark_left("node2-job7")
    assert folder.leaving() == [] and folder.was_let_go("node2-job7")
    with pytest.raises(JoinFolderError, match="not a node name"):
        folder.announce_leaving("../contact.json")
    (folder.path / "contact.json").chmod(0o644)
    with pytest.raises(JoinFolderError, match="readable by others"):
        folder.contact()
    folder.finish()
    assert folder.finished() and folder.contact() is None
    folder.publish(contact)  # a requeued learner opens the run again, without the old markers
    assert not folder.finished() and folder.left() == []
