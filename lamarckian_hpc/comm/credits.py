"""Flow control of the experience channel: the learner grants credits, each message spends one.

Without it, every actor keeps sampling into its own queue, and the experience waiting for the
learner grows with the number of actors: with 64 actors the learner trained on samples 9 policy
versions old, and a model of 6000 cores put it in the hundreds. Sample Factory bounds policy lag
the same way, by letting collection run only so far ahead of learning.

The learner holds a budget of credits, a few batches' worth of messages. An actor asks for its
window (the credits it may hold at once) when it starts, spends one per rollout it sends, and
samples only while it holds one, so no rollout ever waits at the actor. The learner gives a
credit back when it *receives* a credited message, never during an update: while it updates, the
actors fill at most the budget, and the experience in flight (being sampled, in relays, in
queues) is bounded by the budget whatever the number of actors. With more actors than credits,
the credits go round in turn (first come, first served) and the actors without one wait: the
learner is then the ceiling, and waiting costs nothing it could have trained on.

The ledger is pure bookkeeping: the receiver feeds it what arrives and sends the grants it
returns, on whatever route (direct or through relays) the sender's last message came by. A relay's
bundle (`comm.bundle`) is fed to it part by part as the bundle arrives, so a credit is still spent
per sender and rollout, and the grants it then returns for the senders behind one relay go down as
one message; the parts the learner has not handed to its loop yet then hold no credit, so the
experience in flight can pass the budget by at most one relay batch. It keys
each sender by the routing id its socket chose (unique per process), so a route that changes when
a relay re-attaches keeps its account. The counts are cumulative on both sides, which makes a
repeated request idempotent: an actor that waited long without a credit asks again with how many
it has received and spent, and the ledger writes off what never arrived: grants it never got, and
credited messages it sent that never reached the learner (lost with a relay that re-attached).
A written-off message that turns up after all is counted `late` and grants nothing: while
senders re-ask, the budget can be exceeded by at most the messages still on their way. Accounts of senders
silent for `reclaim_seconds` (a dead process) return their credits to the pool.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

#: How long an account may hold credits without a message before they count as lost.
RECLAIM_SECONDS = 120.0


@dataclass
class _Account:
    route: tuple[bytes, ...]
    window: int
    granted: int = 0  # cumulative credits sent to it
    spent: int = 0  # cumulative credited messages received from it
    last_seen: float = field(default_factory=time.monotonic)
    queued: bool = False  # waiting in the ledger's turn queue

    @property
    def outstanding(self) -> int:
        return self.granted - self.spent


class CreditLedger:
    """Credits of one learner: a budget shared by every sender, each holding at most its window."""

    def __init__(self, budget: int, reclaim_seconds: float = RECLAIM_SECONDS) -> None:
        if budget < 1:
            raise ValueError(f"a credit budget must be at least 1, got {budget}")
        self.budget = budget
        self.reclaim_seconds = reclaim_seconds
        self.accounts: dict[bytes, _Account] = {}
        self._turns: deque[bytes] = deque()
        self.in_flight = 0  # credits granted and not yet spent, over every account
        self.uncredited = 0  # credited messages from senders that held no credit
        self.reclaimed = 0
        self.written_off = 0  # credited messages a sender sent and the learner never saw
        self.late = 0  # credited messages that arrived after they were written off

    def want(self, key: bytes, route: tuple[bytes, ...], window: int, received: int = 0, spent: int = 0) -> None:
        """A sender asks for `window` credits at once; `received` and `spent` are its own counts.
        Credits granted beyond `received` are written off (lost on the way, or not yet there: a
        sender asks again only after a long wait), and so are credited messages it sent beyond
        those that arrived: they come back to the pool."""
        account = self.accounts.get(key)
        if account is None:
            account = self.accounts[key] = _Account(route, max(1, window))
        before = account.outstanding
        account.route, account.window, account.last_seen = route, max(1, window), time.monotonic()
        if spent < account.spent:  # a new process under an old id: start over
            account.granted = account.spent = 0
        elif spent > account.spent:  # sent and never here: lost with a relay, or far behind
            self.written_off += spent - account.spent
            account.spent = spent
        if received < account.granted:
            account.granted = max(received, account.spent)
        self.in_flight += account.outstanding - before
        self._queue(key, account)

    def spend(self, key: bytes, route: tuple[bytes, ...]) -> None:
        """A credited message arrived from `key`: its credit comes back to the pool."""
        account = self.accounts.get(key)
        if account is None:
            self.uncredited += 1
            return
        account.route, account.last_seen = route, time.monotonic()
        if account.outstanding <= 0:  # written off already (it counted in the sender's `spent`)
            self.late += 1
            return
        self.in_flight -= 1
        account.spent += 1
        self._queue(key, account)

    def seen(self, key: bytes, route: tuple[bytes, ...]) -> None:
        """Any other message from `key`: its route and liveness."""
        account = self.accounts.get(key)
        if account is not None:
            account.route, account.last_seen = route, time.monotonic()

    def grants(self) -> list[tuple[tuple[bytes, ...], int]]:
        """Credits to send now, (route, count) per sender, in turn while the budget has room."""
        given: dict[bytes, int] = {}
        while self.in_flight < self.budget and self._turns:
            key = self._turns.popleft()
            account = self.accounts.get(key)
            if account is None:
                continue
            account.queued = False
            if account.outstanding >= account.window:
                continue
            account.granted += 1
            self.in_flight += 1
            given[key] = given.get(key, 0) + 1
            self._queue(key, account)
        return [(self.accounts[key].route, count) for key, count in given.items()]

    def reclaim(self, now: float | None = None) -> int:
        """Return the credits of senders silent for `reclaim_seconds` to the pool; how many."""
        now = time.monotonic() if now is None else now
        returned = 0
        for key, account in list(self.accounts.items()):
            if now - account.last_seen > self.reclaim_seconds:
                returned += max(0, account.outstanding)
                self.in_flight -= max(0, account.outstanding)
                del self.accounts[key]
        self.reclaimed += returned
        return returned

    def _queue(self, key: bytes, account: _Account) -> None:
        if not account.queued and account.outstanding < account.window:
            account.queued = True
            self._turns.append(key)
