"""Flow control of the experience channel: the learner's credits bound the messages in flight
whatever the number of senders, go round in turn, survive a lost grant, and work the same through
a relay, where the learner then holds one connection for all the relay's senders."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
import zmq

from lamarckian_hpc.comm import BROADCAST, ExperienceReceiver, ExperienceSender, JobKeys, Message, WeightPublisher
from lamarckian_hpc.comm.credits import CreditLedger
from lamarckian_hpc.comm.relay import Relay, RelaySpec
from lamarckian_hpc.comm.topology import build_tree
from lamarckian_hpc.config import load_config
from lamarckian_hpc.runtime.run_shape import (
    MESSAGE_SAMPLING_SECONDS,
    EnvironmentProbe,
    credit_budget,
    credit_window,
    env_step_seconds,
    message_steps,
    probe_environment,
    spaces_of,
    timed_message_ticks,
    with_message_ticks,
)

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
ROUTE = (b"r",)


def experience(value: float) -> Message:
    return Message("experience", "actor", 1, {"x": np.full(16, value, np.float32)})


def new_credits(grants: list[tuple[tuple[bytes, ...], int, int]]) -> dict[tuple[bytes, ...], int]:
    return {route: count for route, count, _ in grants}


def test_the_ledger_keeps_the_budget_and_gives_credits_in_turn() -> None:
    ledger = CreditLedger(budget=3)
    for key in (b"a", b"b", b"c", b"d"):
        ledger.want((key,), window=2)
    first = ledger.grants()
    assert first == [((b"a",), 1, 1), ((b"b",), 1, 1), ((b"c",), 1, 1)]  # in turn, never past the budget
    assert ledger.in_flight == 3 and ledger.grants() == []
    ledger.spend((b"a",), 1)  # a's message arrived: its credit goes to the next in turn, d
    assert new_credits(ledger.grants()) == {(b"d",): 1}
    ledger.spend((b"b",), 1)
    assert ledger.grants() == [((b"a",), 1, 2)]  # then a again (its second credit), before b asks twice
    assert ledger.in_flight == 3 and ledger.uncredited == 0


def test_the_window_caps_one_sender_and_a_repeated_request_grants_nothing_twice() -> None:
    """A grant is the sender's limit: a request sent before the grants arrived has the limit sent
    again, with nothing new, however long the grants took; the sender cannot hold more than it."""
    ledger = CreditLedger(budget=100)
    ledger.want(ROUTE, window=3)
    assert ledger.grants() == [(ROUTE, 3, 3)]
    ledger.want(ROUTE, window=3, received=1, spent=0)  # asks while two grants are still on their way
    assert ledger.grants() == [(ROUTE, 0, 3)] and ledger.in_flight == 3 and ledger.written_off == 0
    ledger.want(ROUTE, window=3, received=3, spent=0)  # asks again: it holds all three
    assert ledger.grants() == [] and ledger.in_flight == 3
    ledger.spend(ROUTE, 1)
    assert ledger.in_flight == 2 and ledger.grants() == [(ROUTE, 1, 4)]


def test_credited_messages_lost_on_the_way_come_back_to_the_pool() -> None:
    """A relay that re-attaches loses what it held: the sender, asking again, says it spent more
    than arrived, and those credits return (else a few lost messages would stall the budget)."""
    ledger = CreditLedger(budget=2)
    ledger.want(ROUTE, window=2)
    assert ledger.grants() == [(ROUTE, 2, 2)]
    ledger.want((b"b",), window=2)
    assert ledger.grants() == []  # the budget is with a's two messages, lost with its relay
    ledger.want(ROUTE, window=2, received=2, spent=2)
    assert ledger.written_off == 2 and ledger.in_flight == 0
    assert new_credits(ledger.grants()) == {(b"b",): 1, ROUTE: 1}
    ledger.spend(ROUTE, 3)  # the new credit's message
    ledger.spend(ROUTE, 1)  # one of the lost two turns up after all: it grants nothing
    assert ledger.late == 1 and ledger.in_flight == 1 and ledger.accounts[ROUTE].spent == 3
    assert new_credits(ledger.grants()) == {ROUTE: 1}  # one credit back, not two (b holds its share, 1 of 2)


def test_a_message_that_skips_numbers_writes_off_those_it_skipped() -> None:
    ledger = CreditLedger(budget=3)
    ledger.want(ROUTE, window=3)
    ledger.grants()
    ledger.spend(ROUTE, 3)  # 1 and 2 were lost on the way
    assert ledger.written_off == 2 and ledger.in_flight == 0
    ledger.spend(ROUTE, 2)  # or only late: nothing more comes back
    ledger.spend(ROUTE, 9)  # a credit never granted spends nothing
    assert ledger.late == 1 and ledger.uncredited == 1 and ledger.in_flight == 0


def test_a_silent_sender_gives_its_credits_back() -> None:
    ledger = CreditLedger(budget=2, reclaim_seconds=10)
    ledger.want(ROUTE, window=2)
    assert new_credits(ledger.grants()) == {ROUTE: 2}
    ledger.want((b"x",), window=2)
    assert ledger.grants() == []  # the budget is with a sender that died
    assert ledger.reclaim(time.monotonic() + 11) == 2 and ROUTE not in ledger.accounts
    assert ledger.in_flight == 0
    ledger.want((b"x",), window=2)
    assert new_credits(ledger.grants()) == {(b"x",): 2}


def test_messages_sizes_and_credits_follow_the_actor_count() -> None:
    config = load_config(CONFIGS / "ppo_cartpole.yaml", ["algorithm.batch_size=4096", "algorithm.num_minibatches=8"])
    rollout = config.runtime.rollout_steps * config.env.num_envs  # 256 steps
    assert message_steps(config, 2) == rollout  # a whole rollout: well under an actor's share
    assert message_steps(config, 32) == 4096 // 32 == 128  # the share, in whole ticks of 8 envs
    assert message_steps(config, 6000) == config.env.num_envs  # one tick at least
    for actors in (2, 32, 64, 6000):
        budget = credit_budget(config, actors)
        in_flight_steps = budget * message_steps(config, actors)
        assert 4096 <= in_flight_steps < 2 * 4096, (actors, budget)  # one batch in flight, whatever the count
        assert credit_window(config, actors) == max(1, -(-budget // actors))
    more = load_config(CONFIGS / "ppo_cartpole.yaml", ["algorithm.batch_size=4096", "runtime.batches_in_flight=2"])
    assert credit_budget(more, 32) == 2 * credit_budget(config, 32)
    dqn = load_config(CONFIGS / "dqn_cartpole.yaml")
    assert credit_budget(dqn, 16) == 16  # an update per message: every actor keeps one in flight


def test_fast_environments_send_larger_messages_and_the_budget_follows() -> None:
    """Shares of a batch are raised to about MESSAGE_SAMPLING_SECONDS of sampling, at most a
    rollout; a slow environment keeps its shares; the credits stay one batch's worth of steps."""
    config = load_config(CONFIGS / "ppo_cartpole.yaml", ["algorithm.batch_size=4096"])
    rollout_ticks, envs = config.runtime.rollout_steps, config.env.num_envs
    assert timed_message_ticks(config, 32, step_seconds=1e-6) == rollout_ticks  # fast: a whole rollout
    assert timed_message_ticks(config, 32, step_seconds=0.01) == 4096 // 32 // envs  # slow: the share
    middle = MESSAGE_SAMPLING_SECONDS / envs / 24  # 24 ticks take the target time
    assert timed_message_ticks(config, 6000, step_seconds=middle) == 24
    for ticks in (1, 24, rollout_ticks):
        decided = config.model_copy(update={"runtime": config.runtime.model_copy(update={"message_ticks": ticks})})
        assert message_steps(decided, 6000) == ticks * envs
        in_flight_steps = credit_budget(decided, 6000) * message_steps(decided, 6000)
        assert 4096 <= in_flight_steps < 4096 + ticks * envs  # still one batch in flight
    small = load_config(CONFIGS / "ppo_cartpole.yaml", ["algorithm.batch_size=64"])
    assert timed_message_ticks(small, 1, step_seconds=1e-6) == 64 // envs  # never more than a batch
    capped = load_config(CONFIGS / "ppo_cartpole.yaml", ["runtime.message_ticks=1000"])
    assert message_steps(capped, 2) == rollout_ticks * envs  # never more than a rollout


def test_a_run_decides_its_message_ticks_once_and_only_where_asked() -> None:
    config = load_config(CONFIGS / "ppo_cartpole.yaml")
    step = env_step_seconds(config)
    assert 0 < step < 0.01  # CartPole: microseconds a step
    decided = with_message_ticks(config, 15)
    assert decided.runtime.message_ticks == config.runtime.rollout_steps  # fast: whole rollouts
    assert with_message_ticks(decided, 15) is decided  # set: kept as it is
    for overrides in (["runtime.sampling=sync"], ["runtime.message_ticks=2"]):
        kept = load_config(CONFIGS / "ppo_cartpole.yaml", overrides)
        assert with_message_ticks(kept, 15).runtime.message_ticks == kept.runtime.message_ticks
    dqn = load_config(CONFIGS / "dqn_cartpole.yaml")  # a message per update: nothing to decide
    assert with_message_ticks(dqn, 15).runtime.message_ticks is None


def test_the_environment_made_before_the_run_is_the_one_timed(caplog: pytest.LogCaptureFixture) -> None:
    """`probe_environment` gives the spaces, and a step time only where the run sizes messages by
    it; `with_message_ticks` then decides from the probe, making no environment of its own."""
    config = load_config(CONFIGS / "ppo_cartpole.yaml")
    probe = probe_environment(config)
    assert probe.spaces == spaces_of(config) and 0 < probe.step_seconds < 0.01 and probe.step_error is None
    for overrides in (["runtime.sampling=sync"], ["runtime.message_ticks=2"]):
        assert probe_environment(load_config(CONFIGS / "ppo_cartpole.yaml", overrides)).step_seconds is None
    slow = EnvironmentProbe(*probe.spaces, step_seconds=0.01)  # CartPole steps in microseconds: not timed again
    assert with_message_ticks(config, 32, slow).runtime.message_ticks == timed_message_ticks(config, 32, 0.01)
    broken = EnvironmentProbe(*probe.spaces, step_error="RuntimeError: the engine fell over")
    with caplog.at_level("WARNING", logger="lamarckian_hpc.runtime.run_shape"):
        assert with_message_ticks(config, 32, broken).runtime.message_ticks is None  # the share rule
    assert "the engine fell over" in caplog.text


@pytest.fixture
def context():
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


def _fill(senders: list[ExperienceSender], seconds: float) -> int:
    """Every sender sends all it holds credits for, for `seconds`; the messages sent."""
    sent = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for sender in senders:
            while sender.take_credit(0):
                assert sender.send(experience(1.0), timeout_ms=1000, credited=True)
                sent += 1
        time.sleep(0.01)
    return sent


def test_senders_cannot_outrun_the_budget_while_the_learner_does_not_receive(context, tmp_path) -> None:
    keys = JobKeys.create(tmp_path / "keys")
    receiver = ExperienceReceiver(context, {"experience"}, keys=keys, credit_budget=6)
    actor = JobKeys.load(keys.actor_folder)
    senders = [ExperienceSender(context, receiver.address, keys=actor, window=2) for _ in range(10)]
    try:
        for sender in senders:
            sender.ask()
        deadline = time.monotonic() + 10
        while len(receiver.ledger.accounts) < 10:  # hear every request; receives no experience
            assert receiver.receive(50) is None and time.monotonic() < deadline
        assert _fill(senders, 1.0) == 6  # ten senders, window two: six credits, six messages
        got = [receiver.receive(1000) for _ in range(6)]
        assert all(message is not None and message.kind == "experience" for message in got)
        assert receiver.ledger.in_flight == 6  # every received message's credit went back out
        assert _fill(senders, 1.0) == 6  # and was spent again
        assert sum(sender.spent for sender in senders) == 12
        assert max(sender.spent for sender in senders) <= 2  # in turn: nobody took three of twelve
    finally:
        for sender in senders:
            sender.close()
        receiver.close()


def test_a_sender_that_lost_its_grant_asks_again_and_gets_it(context, monkeypatch) -> None:
    import lamarckian_hpc.comm.channels as channels

    monkeypatch.setattr(channels, "ASK_AGAIN_SECONDS", 0.3)
    receiver = ExperienceReceiver(context, {"experience"}, credit_budget=1)
    sender = ExperienceSender(context, receiver.address)
    try:
        assert not sender.take_credit(100)  # asks
        receiver.receive(200)  # grants the one credit...
        assert sender.poll_credits(1000) == 1
        sender.received = 0  # ...which never arrived
        deadline = time.monotonic() + 5
        while not sender.take_credit(50):
            receiver.receive(10)
            assert time.monotonic() < deadline, "the sender never got its credit back"
        assert receiver.ledger.in_flight == 1  # written off and granted again: the budget still holds
    finally:
        sender.close()
        receiver.close()


def test_what_a_sender_announced_goes_up_again_with_each_new_ask(context, monkeypatch) -> None:
    """A hello can die in a relay that dies with it queued: a sender that waited so long for a
    credit that it asks again sends its announcements again first."""
    import lamarckian_hpc.comm.channels as channels

    monkeypatch.setattr(channels, "ASK_AGAIN_SECONDS", 0.3)
    receiver = ExperienceReceiver(context, {"experience", "hello"}, credit_budget=1)
    sender = ExperienceSender(context, receiver.address)
    kinds: list[str] = []

    def take_in(seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            message = receiver.receive(20)
            if message is not None:
                kinds.append(message.kind)

    try:
        assert sender.announce(Message("hello", "actor-0", -1, {}, {"actor_index": 0}))
        deadline = time.monotonic() + 5
        while not sender.take_credit(50):
            take_in(0.05)
            assert time.monotonic() < deadline, "no credit"
        assert kinds == ["hello"]  # once, before the first ask
        sender.send(experience(1.0), credited=True)  # the learner does not take it in: no credit comes back
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            assert not sender.take_credit(50)
        take_in(0.5)
        assert kinds[:3] == ["hello", "experience", "hello"], kinds  # asked again (after 0.3 s), hello first
    finally:
        sender.close()
        receiver.close()


def test_through_a_relay_the_learner_holds_one_connection_and_credits_come_back_down(context, tmp_path) -> None:
    keys = JobKeys.create(tmp_path / "keys")
    relay_folder = keys.write_relay_folder()
    receiver = ExperienceReceiver(context, {"experience", "hello"}, keys=keys, credit_budget=4)
    publisher = WeightPublisher(context, keys=keys)
    tree = build_tree(["node0", "node1"])
    relay = Relay(RelaySpec("node1", tree.to_dict(), {"node0": publisher.address}, ipc_path=f"{tmp_path}/w.ipc",
                            key_folder=str(relay_folder), experience_upstreams={"node0": receiver.address},
                            experience_ipc_path=f"{tmp_path}/e.ipc"), zmq.Context())
    thread = threading.Thread(target=relay.run, daemon=True)
    thread.start()
    actor = JobKeys.load(keys.actor_folder)
    senders = [ExperienceSender(context, f"ipc://{tmp_path}/e.ipc", keys=actor, trust=BROADCAST, window=1)
               for _ in range(8)]
    try:
        received = 0
        deadline = time.monotonic() + 20
        while received < 40:
            assert time.monotonic() < deadline, f"{received} messages through the relay"
            for sender in senders:
                if sender.take_credit(0):
                    sender.send(experience(2.0), credited=True)
            message = receiver.receive(20)
            if message is not None:
                assert np.all(message.arrays["x"] == 2.0)
                received += 1
            assert receiver.ledger.in_flight <= 4
        routes = list(receiver.ledger.accounts)
        assert len(routes) == 8 and {route[0] for route in routes} == {b"relay:node1"}  # one connection
        assert all(len(route) == 2 for route in routes)
        assert relay.stats.experience_up >= 40 and relay.stats.credits_down >= 40
        # At most the budget in flight beyond what the learner took in: a bundle's parts are taken in (and
        # their credits granted again) when it arrives, though `receive` hands them out one by one.
        assert sum(sender.spent for sender in senders) <= receiver.received + 4
    finally:
        relay.stop_event.set()
        thread.join(5)
        for sender in senders:
            sender.close()
        publisher.close()
        receiver.close()


def test_a_message_of_too_many_frames_is_refused_without_holding_them(context) -> None:
    """ZMQ_MAXMSGSIZE bounds each frame, not their number: a message of more frames than any
    well-formed one is taken apart frame by frame, counted as malformed, and the next one served."""
    from lamarckian_hpc.comm.channels import MAX_FRAMES
    from lamarckian_hpc.comm.wire import encode

    receiver = ExperienceReceiver(context, {"experience"})
    peer = context.socket(zmq.DEALER)
    peer.setsockopt(zmq.LINGER, 0)
    peer.connect(receiver.address)
    peer.send_multipart([b"", *encode(experience(1.0)), *[b"x" * 64] * (MAX_FRAMES + 100)])
    peer.send_multipart([b"", *encode(experience(3.0))])
    message = receiver.receive(2000)
    assert message is not None and np.all(message.arrays["x"] == 3.0)
    assert receiver.malformed == 1
    peer.close()
