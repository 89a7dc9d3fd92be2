"""The credit ledger under faults: whatever arrives, restarts, re-asks or returns after a reclaim,
the credits in flight stay within the budget plus what was on its way when it was written off, and
no live sender starves.

A Hypothesis state machine drives one ledger and a model of everything around it: senders that
ask, spend and restart, relays in between that lose what they hold and re-attach (changing the
senders' routes), channels that lose, duplicate and reorder (requests and grants alike), and a
learner that pauses and reclaims. The model knows the true credits in flight (held by senders,
travelling as grants or as credited messages), which the ledger can only estimate, and checks the
bound after every step; and that no grant, however late or repeated, gives a sender more than the
ledger counts for it.
"""

from __future__ import annotations

import itertools
import threading
import time

import pytest
import zmq
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from lamarckian_hpc.comm import ExperienceReceiver, ExperienceSender, Message
from lamarckian_hpc.comm.channels import grant_message
from lamarckian_hpc.comm.wire import encode
from lamarckian_hpc.comm.credits import PAUSE_SECONDS, CreditLedger

RECLAIM = 100.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_sender_reclaimed_and_asking_again_gets_its_window_not_its_lifetime() -> None:
    """The account of a sender that sent 1,000 messages is reclaimed; asking again with its
    lifetime counts once gave it 1,001 credits at once."""
    clock = Clock()
    ledger = CreditLedger(budget=8, reclaim_seconds=RECLAIM, clock=clock)
    route = (b"relay", b"actor")
    ledger.want(route, window=2)
    for number in range(1, 1001):
        ledger.grants()
        ledger.spend(route, number)
    assert ledger.accounts[route].granted == 1001  # it holds one credit: received 1001, spent 1000
    for _ in range(int(RECLAIM) + 2):  # the learner receives all along; the sender is silent
        clock.now += 1
        ledger.listen()
    assert ledger.reclaim() == 1 and route not in ledger.accounts
    ledger.want(route, window=2, received=1001, spent=1000)
    assert ledger.grants() == [(route, 1, 1002)]  # its window of 2, one of which it holds
    assert ledger.in_flight == 2 and ledger.accounts[route].outstanding == 2


def test_a_learner_that_pauses_longer_than_the_reclaim_time_keeps_every_account() -> None:
    clock = Clock()
    ledger = CreditLedger(budget=4, reclaim_seconds=RECLAIM, clock=clock)
    routes = [(b"a",), (b"b",)]
    for route in routes:
        ledger.want(route, window=2)
    ledger.grants()
    clock.now += 150  # a long update: nobody is heard, because nobody is listened to
    ledger.listen()
    assert ledger.reclaim() == 0 and ledger.in_flight == 4
    for second in range(int(RECLAIM) + 2):  # now listening, and one sender stays silent: it is gone
        clock.now += 1
        ledger.listen()
        if second % 10 == 0:
            ledger.seen(routes[0])
    assert ledger.reclaim() == 2 and list(ledger.accounts) == [routes[0]]
    assert PAUSE_SECONDS < RECLAIM


def test_a_sender_that_claims_more_than_it_was_granted_cannot_lower_the_books() -> None:
    ledger = CreditLedger(budget=4)
    route = (b"a",)
    ledger.want(route, window=2)
    ledger.grants()
    ledger.want(route, window=2, received=5, spent=100)  # counts beyond anything granted
    assert ledger.in_flight >= 0 and all(a.outstanding >= 0 for a in ledger.accounts.values())
    assert sum(count for _, count, _ in ledger.grants()) <= 4


def test_routing_frames_a_sender_writes_cannot_spend_another_senders_credits() -> None:
    """A direct sender that writes a victim's id before the delimiter adds a frame below its own
    connection: the account it reaches is its own, not the victim's behind a relay."""
    ledger = CreditLedger(budget=4)
    victim, forged = (b"relay", b"victim"), (b"insider", b"victim")
    ledger.want(victim, window=2)
    ledger.grants()
    ledger.spend(forged, 1)
    ledger.spend(forged, 2)
    assert ledger.accounts[victim].outstanding == 2 and ledger.uncredited == 2
    assert ledger.grants() == []  # nothing was freed for the insider to take


def test_a_sender_that_re_attaches_takes_its_account_to_its_new_route() -> None:
    ledger = CreditLedger(budget=2)
    old, new = (b"relay:1", b"actor"), (b"relay:2", b"actor")
    ledger.want(old, window=2)
    ledger.grants()  # both credits now travel through relay 1, which dies with the messages they paid for
    ledger.want(new, window=2, received=2, spent=2)
    assert old not in ledger.accounts and ledger.written_off == 2
    assert ledger.grants() == [(new, 2, 4)]
    ledger.want(old, window=2, received=0, spent=0)  # a request that waited in the old relay: nothing moves
    assert old not in ledger.accounts and ledger.grants() == []


def test_a_grant_that_arrives_after_the_sender_asked_again_gives_nothing_twice(context) -> None:
    """The learner stopped for minutes: its actors asked again, and the grants that crossed their
    requests arrived as well. Grants were increments: the sender then held the crossed ones and
    the new ones, more than the ledger counted, and the learner trained on older experience for
    the rest of the run (staleness 2.3 against 1.0). A grant is now the sender's limit."""
    clock = Clock()
    ledger = CreditLedger(budget=2, clock=clock)
    route = (b"actor",)
    ledger.want(route, window=2)
    crossed = ledger.grants()  # on its way for a long while (a relay starved of CPU)
    clock.now += 60
    ledger.want(route, window=2, received=0, spent=0)  # the sender asks again, holding nothing
    again = ledger.grants()
    assert [count for _, count, _ in again] == [0]  # the same limit, no new credit
    grants = context.socket(zmq.ROUTER)
    port = grants.bind_to_random_port("tcp://127.0.0.1")
    sender = ExperienceSender(context, f"tcp://127.0.0.1:{port}", window=2)
    try:
        sender.ask()
        assert grants.poll(5000)
        routing_id = grants.recv_multipart()[0]
        for _, count, limit in [*again, *crossed, *again]:  # in any order, repeated
            grants.send_multipart([routing_id, b"", *encode(grant_message(count, limit))])
        deadline = time.monotonic() + 5
        while sender.received < 2 and time.monotonic() < deadline:
            sender.poll_credits(50)
        sender.poll_credits(200)
        assert sender.credits == 2 == ledger.accounts[route].outstanding  # not 4
    finally:
        sender.close()
        grants.close()


@pytest.fixture
def context():
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


def test_a_sender_asks_again_only_after_waiting_not_after_a_quiet_spell(context, monkeypatch) -> None:
    """Re-asks are timed from the start of the wait: an actor that held its credits through a quiet
    spell longer than ASK_AGAIN_SECONDS and then runs dry does not ask again after one poll, which
    would write off grants still on their way."""
    import lamarckian_hpc.comm.channels as channels

    monkeypatch.setattr(channels, "ASK_AGAIN_SECONDS", 0.4)
    receiver = ExperienceReceiver(context, {"experience"}, credit_budget=4)
    sender = ExperienceSender(context, receiver.address, window=1)
    asks = []
    original = receiver.ledger.want
    monkeypatch.setattr(receiver.ledger, "want", lambda *a, **k: (asks.append(time.monotonic()), original(*a, **k)))
    assert sender.take_credit(0) is False
    deadline = time.monotonic() + 5
    while not sender.take_credit(20) and time.monotonic() < deadline:
        receiver.receive(10)
    assert sender.credits == 1 and len(asks) == 1
    time.sleep(0.6)  # a quiet spell, holding the credit
    assert sender.send(Message("experience", "a", 1), timeout_ms=1000, credited=True)
    assert sender.take_credit(50) is False  # dry now; the learner does not answer yet
    assert len(asks) == 1  # not asked again: the wait has only begun
    time.sleep(0.5)
    sender.take_credit(10)
    while receiver.receive(200) is not None:  # the experience message, then the requests
        pass
    assert len(asks) == 2  # after a wait longer than ASK_AGAIN_SECONDS, it asked again


def test_a_send_to_a_peer_that_is_gone_gives_way_to_the_stop_event(context) -> None:
    """An actor whose relay died keeps the pipe: a blocking send once held it for good."""
    stop = threading.Event()
    gone = context.socket(zmq.ROUTER)
    port = gone.bind_to_random_port("tcp://127.0.0.1")
    sender = ExperienceSender(context, f"tcp://127.0.0.1:{port}", window=1, high_water_mark=1, stop=stop)
    gone.close()  # the peer is gone, the pipe stays: the queue fills and sends block
    threading.Timer(0.5, stop.set).start()
    started = time.monotonic()
    results = [sender.send(Message("experience", "a", 1)) for _ in range(50)]
    assert not all(results) and time.monotonic() - started < 5


# The model of a ledger's surroundings ------------------------------------------------------------


class Sender:
    def __init__(self, name: bytes, relay: int, window: int) -> None:
        self.name, self.relay, self.window = name, relay, window
        self.received = self.spent = 0  # its limit, and the number of its last credited message
        self.alive = True

    @property
    def held(self) -> int:
        return self.received - self.spent

    @property
    def route(self) -> tuple[bytes, ...]:
        return (f"relay:{self.relay}".encode(), self.name)


class LedgerMachine(RuleBasedStateMachine):
    """Senders behind relays, a learner with a ledger, and lossy, reordering channels between."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        self.budget = 6
        self.ledger = CreditLedger(self.budget, reclaim_seconds=RECLAIM, clock=self.clock)
        self.names = itertools.count()
        self.everyone: dict[bytes, Sender] = {}  # dead ones too: grants may still go their way
        self.senders = [self._new_sender(relay, window) for relay, window in ((0, 2), (0, 3), (1, 1), (1, 2))]
        self.up: list[tuple[Sender, tuple[bytes, ...], str, tuple[int, ...]]] = []  # what arrives at the learner
        self.down: list[tuple[Sender, int]] = []  # grants (limits) on their way to a sender
        # Per sender, the true credits the ledger stopped counting while they still existed.
        self.allowance: dict[bytes, int] = {}
        self.reclaimed: set[bytes] = set()  # senders whose account was reclaimed while they lived
        self.paused = False

    def _new_sender(self, relay: int, window: int) -> Sender:
        sender = Sender(f"s{next(self.names)}".encode(), relay, window)
        self.everyone[sender.name] = sender
        return sender

    def _limit(self, sender: Sender) -> int:
        """The highest limit the sender has or can still get from the grants on their way."""
        return max([sender.received, *(limit for s, limit in self.down if s is sender)])

    def _real(self, sender: Sender) -> int:
        """The true credits of a live sender: those it holds or will hold once the grants on their
        way arrive, and those of its credited messages still on their way up."""
        if not sender.alive:
            return 0
        return (self._limit(sender) - sender.spent
                + sum(1 for s, _, kind, _ in self.up if s is sender and kind == "spend"))

    def _true_in_flight(self) -> int:
        return sum(self._real(sender) for sender in self.senders)

    def _books_of(self, sender: Sender) -> int:
        """What the ledger counts in flight for `sender`, over every route it came by."""
        return sum(account.outstanding for route, account in self.ledger.accounts.items() if route[-1] == sender.name)

    def _uncounted(self, sender: Sender) -> int:
        return max(0, self._real(sender) - max(0, self._books_of(sender)))

    def _allow(self, sender: Sender, before: int) -> None:
        self.allowance[sender.name] = self.allowance.get(sender.name, 0) + max(0, self._uncounted(sender) - before)

    def _learner_receives(self, index: int) -> None:
        sender, route, kind, counts = self.up.pop(index)
        self.clock.now += 0.01
        self.ledger.listen()
        before = self._uncounted(sender)
        if kind == "want":
            self.ledger.want(route, *counts)
        else:
            self.ledger.spend(route, *counts)
        # Credits that still exist and that the ledger stopped counting (credited messages written
        # off while on their way): the only way past the budget but a reclaim.
        self._allow(sender, before)
        for granted_route, _, limit in self.ledger.grants():
            self.down.append((self.everyone[granted_route[-1]], limit))

    @invariant()
    def the_books_add_up(self) -> None:
        accounts = self.ledger.accounts.values()
        assert all(0 <= account.outstanding for account in accounts)
        assert self.ledger.in_flight == sum(account.outstanding for account in accounts)

    @invariant()
    def credits_in_flight_stay_within_the_budget(self) -> None:
        assert self._true_in_flight() <= self.budget + sum(self.allowance.values())
        for sender in self.senders:
            assert self._real(sender) <= sender.window + self.allowance.get(sender.name, 0), sender.name

    @invariant()
    def no_grant_gives_more_than_the_ledger_counts(self) -> None:
        """Late, repeated or crossed, a grant never takes a sender past the limit the ledger keeps
        for it (but after a reclaim, when the grants of its old account may still be travelling)."""
        for route, account in self.ledger.accounts.items():
            sender = self.everyone[route[-1]]
            if sender.alive and sender.name not in self.reclaimed:
                assert self._limit(sender) <= account.granted, (sender.name, self._limit(sender), account.granted)

    @rule(index=st.integers(0, 3))
    def ask(self, index: int) -> None:
        sender = self.senders[index]
        self.up.append((sender, sender.route, "want", (sender.window, sender.received, sender.spent)))

    @rule(index=st.integers(0, 3))
    def send(self, index: int) -> None:
        sender = self.senders[index]
        if sender.held > 0:
            sender.spent += 1
            self.up.append((sender, sender.route, "spend", (sender.spent,)))

    @precondition(lambda self: not self.paused)
    @rule(rounds=st.integers(1, 20))
    def healthy_traffic(self, rounds: int) -> None:
        """A while of a run without faults: every sender spends what it holds, the dry ones ask,
        and everything arrives (the counts grow large, as in a long run)."""
        for _ in range(rounds):
            for index, sender in enumerate(self.senders):
                while sender.held:
                    self.send(index)
                if not any(item[0] is sender for item in self.down):
                    self.ask(index)
            while self.up:
                self._learner_receives(0)
            while self.down:
                self.deliver_down(_First())

    @precondition(lambda self: self.up and not self.paused)
    @rule(data=st.data())
    def deliver_up(self, data: st.DataObject) -> None:
        self._learner_receives(data.draw(st.integers(0, len(self.up) - 1)))  # any order

    @precondition(lambda self: self.down)
    @rule(data=st.data())
    def deliver_down(self, data: st.DataObject) -> None:
        sender, limit = self.down.pop(data.draw(st.integers(0, len(self.down) - 1)))
        if sender.alive:
            sender.received = max(sender.received, limit)

    @precondition(lambda self: self.up)
    @rule(data=st.data())
    def lose_up(self, data: st.DataObject) -> None:
        self.up.pop(data.draw(st.integers(0, len(self.up) - 1)))

    @precondition(lambda self: self.down)
    @rule(data=st.data())
    def lose_down(self, data: st.DataObject) -> None:
        self.down.pop(data.draw(st.integers(0, len(self.down) - 1)))

    @precondition(lambda self: any(kind == "want" for _, _, kind, _ in self.up))
    @rule(data=st.data())
    def duplicate_a_request(self, data: st.DataObject) -> None:
        requests = [item for item in self.up if item[2] == "want"]
        self.up.append(data.draw(st.sampled_from(requests)))

    @precondition(lambda self: self.down)
    @rule(data=st.data())
    def duplicate_a_grant(self, data: st.DataObject) -> None:
        self.down.append(data.draw(st.sampled_from(self.down)))

    @rule(index=st.integers(0, 3))
    def restart(self, index: int) -> None:
        """The process dies (its credits with it) and Ray starts a new one, with a new id."""
        old = self.senders[index]
        old.alive = False
        self.senders[index] = self._new_sender(old.relay, old.window)

    @rule(relay=st.integers(0, 1))
    def relay_dies_and_its_senders_re_attach(self, relay: int) -> None:
        """What the relay held is lost both ways; its senders now come by the other relay."""
        self.up = [item for item in self.up if item[1][0] != f"relay:{relay}".encode()]
        self.down = [item for item in self.down if item[0].relay != relay]
        for sender in self.senders:
            if sender.relay == relay:
                sender.relay = 1 - relay

    @rule(seconds=st.sampled_from([1.0, 30.0, RECLAIM + 1]))
    def time_passes(self, seconds: float) -> None:
        """Time passes; the learner does not listen (a pause), unless it is not paused."""
        self._wait(seconds)

    def _wait(self, seconds: float) -> None:
        for _ in range(int(seconds)):
            self.clock.now += 1.0
            if not self.paused:
                self.ledger.listen()

    @rule()
    def learner_pauses_or_resumes(self) -> None:
        self.paused = not self.paused

    @precondition(lambda self: not self.paused)
    @rule()
    def reclaim(self) -> None:
        self._reclaim()

    def _reclaim(self) -> None:
        self.ledger.listen()
        before = {sender.name: self._uncounted(sender) for sender in self.senders}
        accounts = {route[-1] for route in self.ledger.accounts}
        self.ledger.reclaim()
        self.reclaimed |= accounts - {route[-1] for route in self.ledger.accounts}
        for sender in self.senders:
            self._allow(sender, before[sender.name])

    def teardown(self) -> None:
        """Liveness: once faults stop, every live sender that keeps asking gets credits again."""
        self.paused = False
        got = {sender.name: sender.received for sender in self.senders}
        for _ in range(12):
            self._wait(RECLAIM / 4)
            self.healthy_traffic(1)
            self._reclaim()
        self.the_books_add_up()
        self.credits_in_flight_stay_within_the_budget()
        self.no_grant_gives_more_than_the_ledger_counts()
        starved = [sender.name for sender in self.senders if sender.received == got[sender.name]]
        assert not starved, f"senders {starved} got no credit once the faults stopped"


class _First:
    """A stand-in for Hypothesis's data object in teardown: always the first item."""

    def draw(self, strategy: st.SearchStrategy) -> int:
        return 0


LedgerMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=30, deadline=None,
                                           suppress_health_check=[HealthCheck.too_slow])
test_the_ledger_holds_its_bounds_whatever_happens = LedgerMachine.TestCase


def test_requests_queued_while_the_learner_paused_do_not_write_off_its_fresh_grants() -> None:
    """An actor that ran dry during a long update asks again; its request waits in the socket and
    is read after the grants the learner sends on resuming, which it cannot yet count as received.
    Writing those off (and granting again) put four times the budget in flight; now the request
    has the limit sent again, with nothing new."""
    clock = Clock()
    ledger = CreditLedger(budget=2, clock=clock)
    route = (b"a",)
    ledger.want(route, window=2)
    ledger.grants()
    ledger.spend(route, 1)
    ledger.spend(route, 2)  # it sent both; the learner then updates for a long while
    clock.now += 150
    assert ledger.grants() == [(route, 2, 4)]  # resuming: two fresh credits go out
    ledger.want(route, window=2, received=2, spent=2)  # the request it sent during the pause
    assert ledger.written_off == 0 and ledger.grants() == [(route, 0, 4)] and ledger.in_flight == 2
