"""A budget no sender can hold: the learner decides each sender's window (its fair share of the
budget), only a credit spent keeps an account that holds credits alive, a dead route gets no credit
again, and a request written to look like another sender's cannot move that sender's account.

Each test here failed on the ledger before these rules: a greedy sender asking for a window of
2^61 and pinging once a second kept the whole budget of 8 (the honest sender got no credit in 12 s),
a restarted actor's dead route was granted credits it held for two minutes, and a forged last
routing frame took another sender's account over.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
import zmq

from lamarckian_hpc.comm import ExperienceReceiver, ExperienceSender, Message
from lamarckian_hpc.comm.channels import CREDIT, credit_request, read_grant
from lamarckian_hpc.comm.credits import CreditLedger
from lamarckian_hpc.comm.wire import decode, encode
from lamarckian_hpc.runtime.learner.actor_watch import ActorWatch
from lamarckian_hpc.runtime.learner.intake import ExperienceIntake
from lamarckian_hpc.runtime.messages import KINDS, MessageSpec, hello_message

HUGE = 1 << 61


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def context():
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


# The ledger --------------------------------------------------------------------------------------


def test_a_sender_asking_for_a_huge_window_gets_its_share_and_the_others_keep_theirs() -> None:
    """Both ask before any grant: the greedy one gets half the budget of 8, not every credit the
    honest one gives back (it was first in turn each time, and never spent)."""
    ledger = CreditLedger(budget=8)
    greedy, honest = (b"greedy",), (b"honest",)
    ledger.want(greedy, window=HUGE)
    ledger.want(honest, window=4)
    ledger.grants()
    assert ledger.accounts[greedy].outstanding == 4 == ledger.accounts[honest].outstanding
    for number in range(1, 21):  # the honest one spends; the greedy one never does
        ledger.spend(honest, number)
        assert [(route, count) for route, count, _ in ledger.grants()] == [(honest, 1)]
    assert ledger.accounts[greedy].outstanding == 4 and ledger.window(greedy) == 4


def test_a_sender_alone_holds_the_budget_only_until_others_ask_and_its_silence_is_reclaimed() -> None:
    """Alone, a sender may hold the whole budget; once another asks, its share is half, and credits
    held without spending come back after the reclaim time, however often it asks or sends
    uncredited or late messages meanwhile. Asking again, it holds its share, not the budget."""
    clock = Clock()
    ledger = CreditLedger(budget=8, reclaim_seconds=10, clock=clock)
    greedy, honest = (b"greedy",), (b"honest",)
    ledger.want(greedy, window=HUGE)
    assert ledger.grants() == [(greedy, 8, 8)]
    ledger.spend(greedy, 1)
    ledger.grants()  # its one spend, given back: it holds 8 again, granted 9
    ledger.want(honest, window=4)
    assert ledger.grants() == []
    for second in range(1, 20):  # pings: requests claiming its counts, and a late spend, once a second
        clock.now += 1
        ledger.listen()
        ledger.want(greedy, window=HUGE, received=9, spent=1)
        ledger.spend(greedy, 1)
        ledger.want(honest, window=4)  # the honest one, dry, asks again too (it holds nothing)
        ledger.reclaim()
        given = ledger.grants()
        if greedy not in ledger.accounts:
            reclaimed_after = second
            break
        assert given == []
    else:
        reclaimed_after = None
    assert reclaimed_after == 11 and ledger.reclaimed == 8  # the reclaim time after its last grant
    assert given == [(honest, 4, 4)]
    ledger.want(greedy, window=HUGE, received=9, spent=1)  # back, saying it holds 8
    assert ledger.accounts[greedy].outstanding == 4 and ledger.grants() == []  # its share


def test_a_written_off_route_is_granted_nothing_until_its_sender_asks_on_it_again() -> None:
    ledger = CreditLedger(budget=4)
    lost, other = (b"relay", b"lost"), (b"relay", b"other")
    ledger.want(lost, window=2)
    ledger.want(other, window=2)
    ledger.grants()
    ledger.spend(other, 1)  # room in the budget, and `lost` would be next in turn
    assert ledger.write_off(lost) == 2 and ledger.in_flight == 1
    assert new_routes(ledger.grants()) == {other}
    ledger.want(lost, window=2, received=2, spent=2)  # its sender is alive after all, and asks
    assert new_routes(ledger.grants()) == {lost}


def test_a_live_route_written_off_keeps_its_turn_and_is_granted_at_once() -> None:
    """A synchronous batch completed without an actor's share: the actor samples on, and gets its
    credits back at once to sample the next version, not after asking again."""
    ledger = CreditLedger(budget=4)
    live = (b"relay", b"live")
    ledger.want(live, window=2)
    ledger.grants()
    assert ledger.write_off(live, live=True) == 2 and ledger.in_flight == 0
    assert new_routes(ledger.grants()) == {live} and ledger.in_flight == 2


def test_a_closed_route_is_never_granted_again_not_even_by_its_request_still_on_the_way() -> None:
    ledger = CreditLedger(budget=4)
    dead = (b"relay", b"dead")
    ledger.want(dead, window=2)
    ledger.grants()
    assert ledger.close(dead) == 2 and ledger.in_flight == 0
    ledger.want(dead, window=2, received=2, spent=0)  # it asked before it died; the request arrives now
    assert dead not in ledger.accounts and ledger.grants() == [] and ledger.in_flight == 0


def test_a_forged_last_routing_frame_cannot_move_another_senders_account() -> None:
    """An insider connected to the learner writes the victim's id below its own connection and
    asks, claiming the victim's counts: that is an account of its own, not the victim's."""
    ledger = CreditLedger(budget=4)
    victim, forged = (b"relay:n", b"victim"), (b"insider", b"victim")
    ledger.want(victim, window=2)
    ledger.grants()
    ledger.want(forged, window=2, received=2, spent=2)
    assert ledger.accounts[victim].outstanding == 2 and ledger.accounts[forged].granted == 2
    ledger.spend(victim, 1)
    ledger.spend(victim, 2)
    assert ledger.uncredited == 0 and ledger.accounts[victim].spent == 2


def new_routes(grants: list[tuple[tuple[bytes, ...], int, int]]) -> set[tuple[bytes, ...]]:
    return {route for route, count, _ in grants if count}


# Through the real channel -------------------------------------------------------------------------


def _dealer(context: zmq.Context, address: str, routing_id: bytes) -> zmq.Socket:
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.ROUTING_ID, routing_id)
    socket.connect(address)
    return socket


def _limits(socket: zmq.Socket) -> list[int]:
    """The limits of the grants that reached a raw DEALER so far."""
    limits = []
    while socket.poll(0):
        frames = socket.recv_multipart()
        limits.append(read_grant(decode(frames[1:], known_kinds={CREDIT}))[1])
    return limits


def test_a_greedy_sender_that_pings_cannot_starve_an_honest_one_through_the_channel(context, monkeypatch) -> None:
    """Budget 8, reclaim shortened to 0.3 s (and a dry sender's ask again to 0.1 s, shorter as in
    a run). A greedy sender asks for a window of 2^61 while alone, gets all 8 credits, and then,
    never spending, sends a request, an uncredited message and a malformed one every 0.2 s. An
    honest sender that asks gets a credit within about a second (the reclaim time and the
    receiver's once-a-second reclaim); it used to get none, ever."""
    import lamarckian_hpc.comm.channels as channels

    monkeypatch.setattr(channels, "ASK_AGAIN_SECONDS", 0.1)
    receiver = ExperienceReceiver(context, {"experience"}, credit_budget=8)
    receiver.ledger.reclaim_seconds = 0.3
    greedy = _dealer(context, receiver.address, b"greedy")
    honest = ExperienceSender(context, receiver.address, window=4)
    try:
        greedy.send_multipart([b"", *encode(credit_request(HUGE, 0, 0))])
        deadline = time.monotonic() + 5
        while receiver.ledger.in_flight < 8:
            receiver.receive(20)
            assert time.monotonic() < deadline, "the greedy sender was never granted the budget"
        assert max(_limits(greedy) or [0]) <= 8
        asked_at, pinged_at, waited = time.monotonic(), 0.0, None
        while waited is None and time.monotonic() - asked_at < 4:
            if time.monotonic() - pinged_at > 0.2:
                pinged_at = time.monotonic()
                greedy.send_multipart([b"", *encode(credit_request(HUGE, 8, 0))])
                greedy.send_multipart([b"", *encode(Message("experience", "greedy", 1, {"x": np.zeros(2, np.float32)}))])
                greedy.send_multipart([b"", *encode(Message("experience", "greedy", 1, {}, {CREDIT: -1}))])
            receiver.receive(20)
            if honest.take_credit(0):
                waited = time.monotonic() - asked_at
        assert waited is not None, f"the honest sender got no credit in 4 s: accounts {receiver.ledger.accounts}"
        print(f"the honest sender's first credit came {waited:.2f} s after it asked")
        assert waited < 2.5, waited
        receiver.receive(200)
        greedy_routes = [route for route in receiver.ledger.accounts if route == (b"greedy",)]
        assert all(receiver.ledger.accounts[route].outstanding <= 4 for route in greedy_routes)  # its share
    finally:
        greedy.close()
        honest.close()
        receiver.close()


def test_a_forged_credit_request_cannot_take_another_senders_account_through_the_channel(context) -> None:
    """A victim behind a relay (here a DEALER that prepends the victim's id, as a relay's ROUTER
    does) holds credits; an insider connected to the learner writes the victim's id as its last
    routing frame and asks. The victim's account stays where the transport saw it, and its
    credited messages still spend its own credits."""
    receiver = ExperienceReceiver(context, {"experience"}, credit_budget=4)
    relay = _dealer(context, receiver.address, b"relay:n")
    insider = _dealer(context, receiver.address, b"insider")
    victim_id = os.urandom(8)
    victim = (b"relay:n", victim_id)
    try:
        relay.send_multipart([victim_id, b"", *encode(credit_request(2, 0, 0))])
        deadline = time.monotonic() + 5
        while victim not in receiver.ledger.accounts or receiver.ledger.accounts[victim].outstanding < 2:
            receiver.receive(20)
            assert time.monotonic() < deadline, "the victim was never granted its credits"
        insider.send_multipart([victim_id, b"", *encode(credit_request(2, 2, 2))])
        deadline = time.monotonic() + 5
        while (b"insider", victim_id) not in receiver.ledger.accounts and time.monotonic() < deadline:
            receiver.receive(20)
        assert receiver.ledger.accounts[victim].outstanding == 2  # not moved, nothing written off
        for number in (1, 2):
            relay.send_multipart([victim_id, b"", *encode(Message("experience", "victim", 1, {}, {CREDIT: number}))])
        got = [receiver.receive(2000) for _ in range(2)]
        assert all(message is not None for message in got)
        assert receiver.ledger.uncredited == 0 and receiver.ledger.accounts[victim].spent == 2
    finally:
        relay.close()
        insider.close()
        receiver.close()


# The learner's intake -----------------------------------------------------------------------------


class Intake(ExperienceIntake):
    """The receiving half of a learner, with nothing else around it."""

    def __init__(self, receiver: ExperienceReceiver) -> None:
        self.receiver = receiver
        self.spec = MessageSpec(num_actors=1, observation_shape=(4,), observation_uint8=False, action_shape=(),
                                action_range=(0, 2), recorded_observation_shape=(4,))
        self.watch = ActorWatch(1, 60.0, 60.0, describe=lambda indices: "")
        self.hellos, self.actor_pids, self.actor_routes, self.next_sequence = {}, {}, {}, {}
        self.malformed_logged = {}


def _serve_until_window(intake, sender: ExperienceSender, who: str) -> None:
    """Let the intake take messages until `sender` holds its window of 2 (at most 5 s)."""
    deadline = time.monotonic() + 5
    while sender.poll_credits(0) < 2:
        intake._next_message()
        assert time.monotonic() < deadline, f"{who} never got its window"


def test_a_restarted_actor_gives_its_dead_routes_credits_back_at_once_and_for_good(context) -> None:
    """Actor 0's process holds its window of 2 and dies; the new process says hello with a new pid.
    The dead route's credits are back in the pool at once, and it is never granted again (they
    went to it, and waited there for the reclaim's two minutes), not even when a request it sent
    before dying arrives late."""
    receiver = ExperienceReceiver(context, KINDS, credit_budget=4)
    intake = Intake(receiver)
    old = ExperienceSender(context, receiver.address, window=2)
    new = ExperienceSender(context, receiver.address, window=2)
    try:
        old.announce(hello_message(0, 100, "node"))
        old.ask()
        _serve_until_window(intake, old, "the first process")
        dead_route = intake.actor_routes[0]
        assert receiver.ledger.in_flight == 2
        old.send(credit_request(2, 2, 0))  # a request of the old process, still on its way
        new.announce(hello_message(0, 101, "node"))
        new.ask()
        _serve_until_window(intake, new, "the new process")
        for _ in range(5):
            intake._next_message()
        assert intake.actor_routes[0] != dead_route and dead_route not in receiver.ledger.accounts
        assert receiver.ledger.in_flight == 2 == receiver.ledger.accounts[intake.actor_routes[0]].outstanding
        assert receiver.ledger.written_off == 2 and receiver.ledger.reclaimed == 0
        assert old.poll_credits(200) == 2 and old.received == 2  # nothing more went to the dead route
    finally:
        old.close()
        new.close()
        receiver.close()
