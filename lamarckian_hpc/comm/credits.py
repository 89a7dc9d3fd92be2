"""Flow control of the experience channel: the learner grants credits, each message spends one.

Without it, every actor keeps sampling into its own queue, and the experience waiting for the
learner grows with the number of actors: with 64 actors the learner trained on samples 9 policy
versions old, and a model of 6000 cores put it in the hundreds. Sample Factory bounds policy lag
the same way, by letting collection run only so far ahead of learning.

The learner holds a budget of credits, a few batches' worth of messages. An actor asks for its
window (the credits it may hold at once) when it starts, spends one per rollout it sends, and
samples only while it holds one, so no rollout ever waits at the actor. The learner, not the
sender, decides the window, as TCP's receiver does: a sender gets what it asks for up to its fair
share of the budget (the budget over the senders with an account, one at least), so no sender can
hold the budget the others need, whatever window it asks for. The learner gives a
credit back when it *receives* a credited message, never during an update: while it updates, the
actors fill at most the budget, and the experience in flight (being sampled, in relays, in
queues) is bounded by the budget whatever the number of actors. With more actors than credits,
the credits go round in turn (first come, first served) and the actors without one wait: the
learner is then the ceiling, and waiting costs nothing it could have trained on.

The ledger is pure bookkeeping: the receiver feeds it what arrives and sends the grants it
returns, on whatever route (direct or through relays) the sender's message came by. A relay's
bundle (`comm.bundle`) is fed to it part by part as the bundle arrives, so a credit is still spent
per sender and rollout, and the grants it then returns for the senders behind one relay go down as
one message; the parts the learner has not handed to its loop yet then hold no credit, so the
experience in flight can pass the budget by at most one relay batch.

An account is keyed by the whole route the transport saw (every ROUTER on the way prepends the id
of the connection a message came on), never by a frame a sender wrote: a sender that writes
routing frames of its own only adds them below its own connection, so it cannot spend or take
another sender's credits. Nor can it move them: a request takes an account over from another route
only where both end in the same two frames, the sender's id and the id of the connection that first
saw it (its node's relay), which a sender's own frames cannot reproduce under its own connection.

The counts are cumulative on both sides, and so are the grants and the spends: a grant says how
many credits the sender has been granted in all (its limit, as TCP's window is an edge, not an
increment), and a credited message says which of the sender's credits it spends (its number). A
grant that comes twice, late or out of order gives nothing past the newest limit; a message that
comes after a later one of its sender (or after it was written off) is `late` and spends nothing.
So the ledger never needs to guess whether a grant is lost or still travelling: a sender that
waited long without a credit asks again with how many it has received and spent, and the ledger
sends its limit again (granting nothing new) when the sender has not got it all, and writes off the
credited messages the sender sent that never reached it (lost with a relay). The credits a sender
can hold are then never more than the ledger counts for it. Whatever a sender claims, an account
never holds less than nothing nor more than its window, so no request can make the ledger grant
past the budget.

When a relay above a sender's own re-attaches, its senders' routes change above that relay; a
sender that then asks on a new route takes its account there, with the ledger's counts, and the
old route is closed. Accounts silent for `reclaim_seconds` (a dead process) return their credits to
the pool; the time the learner itself was not listening (a long update, a slow checkpoint, a
stopped process) does not count as silence. Only a credit spent keeps an account that holds credits
alive, counted from its last grant: a request, an uncredited message, a late or repeated credit
number says nothing about the credits it holds, or a sender could hold them for ever by pinging (a
sender that holds none keeps its place in the turns by asking). A route whose process is known dead
(`close`) is never granted again, and one whose credits were written off (`write_off`) only once
its sender asks again on it. A sender whose account was reclaimed and that asks again starts a
fresh account from its own counts, holding the credits it says it holds (its share at most); only a
grant that was still travelling when its account was reclaimed can then take it past its window.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

#: How long an account may hold credits without a message before they count as lost.
RECLAIM_SECONDS = 120.0
#: Routes closed (`close`) remembered, so that a request of theirs still on its way grants nothing.
CLOSED_REMEMBERED = 1 << 16
#: A learner that did not receive for this long was paused (an update, a checkpoint, a stop): the
#: silence of its senders over that time is its own, not theirs.
PAUSE_SECONDS = 5.0

Route = tuple[bytes, ...]


def _seen_by(route: Route) -> Route:
    """What identifies a sender across re-attachments: its own id and the id of the connection that
    first saw it (its node's relay), the last two frames; a route of one frame (a sender connected
    to the learner itself) only by the whole of it. A sender that writes routing frames adds them
    below its own connection, so these are never the frames of another sender's route."""
    return route[-2:]


@dataclass
class _Account:
    window: int  # the window it asked for; it holds at most its share of the budget (`CreditLedger.window`)
    last_seen: float  # when it last spent a credit, or was granted one
    granted: int = 0  # cumulative credits granted to it: its limit
    spent: int = 0  # the number of the newest credited message received from it
    queued: bool = False  # waiting in the ledger's turn queue
    dormant: bool = False  # written off: granted nothing until its sender asks again

    @property
    def outstanding(self) -> int:
        return self.granted - self.spent


class CreditLedger:
    """Credits of one learner: a budget shared by every sender, each holding at most its window."""

    def __init__(self, budget: int, reclaim_seconds: float = RECLAIM_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if budget < 1:
            raise ValueError(f"a credit budget must be at least 1, got {budget}")
        self.budget = budget
        self.reclaim_seconds = reclaim_seconds
        self.clock = clock
        self.accounts: dict[Route, _Account] = {}
        self._by_sender: dict[Route, Route] = {}  # `_seen_by` a route -> the route of its sender's account
        self._closed: dict[Route, None] = {}  # routes closed, oldest first
        self._turns: deque[Route] = deque()
        self._resend: set[Route] = set()  # senders that asked without having their limit
        self.in_flight = 0  # credits granted and not yet spent, over every account
        self.uncredited = 0  # credited messages from senders that held no credit
        self.reclaimed = 0
        self.written_off = 0  # credits granted or spent that never arrived where they were going
        self.late = 0  # credited messages that arrived after they were written off
        self._listened_at = self._listening_since = clock()

    def listen(self) -> None:
        """The learner is receiving; after a pause, every sender's silence counts from now."""
        now = self.clock()
        if now - self._listened_at > PAUSE_SECONDS:
            self._listening_since = now
        self._listened_at = now

    def want(self, route: Route, window: int, received: int = 0, spent: int = 0) -> None:
        """A sender asks for `window` credits at once (it gets at most its share, `window`);
        `received` (its limit) and `spent` are its own counts. Its credited messages the ledger has
        not seen are written off (lost on the way: a sender asks again only after a long wait), and
        its limit is sent again when it has not got it all. A request that comes after a newer one
        changes nothing, and no request keeps an account that holds credits alive."""
        if route in self._closed:
            return  # the request of a process known dead, late
        window = max(1, window)
        account = self.accounts.get(route)
        if account is None:
            old = self._by_sender.get(_seen_by(route))
            known = self.accounts.get(old) if old is not None else None
            if known is not None and spent < known.spent:
                return  # a request that took a way its sender has left, overtaken by newer messages
            account = self._take_over(route, old) if known is not None else None
        if account is None:  # new, or reclaimed: start from the sender's own counts
            account = self.accounts[route] = _Account(window, self.clock(), granted=spent, spent=spent)
            self._by_sender[_seen_by(route)] = route
            held = min(self.window(route), max(0, received - spent))
            account.granted += held
            self.in_flight += held
        else:
            account.window, account.dormant = window, False
            # Counts only ever make the account hold less: what it claims beyond the grants never was.
            spent = min(spent, account.granted)
            if spent > account.spent:
                lost = spent - account.spent
                self.written_off += lost
                self.in_flight -= lost
                account.spent = spent
            if received < account.granted:
                self._resend.add(route)
            if account.outstanding == 0:  # it holds nothing, so asking is a sign of life that costs none
                account.last_seen = self.clock()
        self._queue(route, account)

    def window(self, route: Route) -> int:
        """The credits `route`'s sender may hold now: the window it asked for, at most its fair
        share of the budget (the budget over the accounts open, one at least)."""
        share = max(1, -(-self.budget // max(1, len(self.accounts))))
        return min(self.accounts[route].window, share)

    def spend(self, route: Route, number: int) -> None:
        """A credited message arrived by `route`, spending the sender's credit `number` (1 for its
        first): its credits up to that number come back to the pool (those it skipped were lost on
        the way, and are written off)."""
        account = self.accounts.get(route)
        if account is None or number > account.granted:  # no account, or a credit never granted
            self.uncredited += 1
            return
        if number <= account.spent:  # written off already, or overtaken by a later one: no sign of life
            self.late += 1
            return
        account.last_seen = self.clock()
        self.written_off += number - account.spent - 1
        self.in_flight -= number - account.spent
        account.spent = number
        self._queue(route, account)

    def write_off(self, route: Route, live: bool = False) -> int:
        """The receiver knows the credits of `route` will not come back (its share of a batch was
        lost on the way): they return to the pool at once, and one that turns up after all is
        `late`. The route gets no credit again until its sender asks again on it: a route written
        off may be dead, and what it was granted would wait there for the reclaim. `live`: the
        receiver knows its sender samples on (a synchronous batch completed without its share), so
        it keeps its turn and samples the next version at once. How many."""
        account = self.accounts.get(route)
        if account is None:
            return 0
        lost = account.outstanding
        account.spent = account.granted
        self.in_flight -= lost
        self.written_off += lost
        if live:
            self._queue(route, account)
        else:
            account.dormant = True  # its turn, if queued, is skipped in `grants`
            self._resend.discard(route)
        return lost

    def close(self, route: Route) -> int:
        """The sender of `route` is gone for good (its node left the run, or its process restarted
        under a new route): its account closes, the credits it held return to the pool at once,
        counted as written off, and it is never granted again (a message it sent that turns up after
        all is `uncredited`, a request of its grants nothing). How many."""
        lost = self._retire(route)
        self.written_off += lost
        self._closed[route] = None
        if len(self._closed) > CLOSED_REMEMBERED:
            del self._closed[next(iter(self._closed))]
        return lost

    def grants(self) -> list[tuple[Route, int, int]]:
        """Grants to send now, (route, new credits, limit) per sender: new credits in turn while the
        budget has room, and the limit again (perhaps with none new) to senders that asked without
        having it."""
        given: dict[Route, int] = {}
        while self.in_flight < self.budget and self._turns:
            route = self._turns.popleft()
            account = self.accounts.get(route)
            if account is None:
                continue
            account.queued = False
            if account.outstanding >= self.window(route) or account.dormant:
                continue
            account.granted += 1
            account.last_seen = self.clock()  # it has `reclaim_seconds` to spend what it was given
            self.in_flight += 1
            given[route] = given.get(route, 0) + 1
            self._queue(route, account)
        for route in self._resend:
            if route in self.accounts:
                given.setdefault(route, 0)
        self._resend.clear()
        return [(route, count, self.accounts[route].granted) for route, count in given.items()]

    def reclaim(self, now: float | None = None) -> int:
        """Return the credits of senders silent for `reclaim_seconds` to the pool, closing their
        accounts; how many. Silence counts only while the learner listened (`listen`), and from the
        last credit spent or granted (or request, for an account that holds none)."""
        now = self.clock() if now is None else now
        returned = 0
        for route, account in list(self.accounts.items()):
            if now - max(account.last_seen, self._listening_since) > self.reclaim_seconds:
                returned += self._retire(route)
        self.reclaimed += returned
        return returned

    def _take_over(self, route: Route, old: Route) -> _Account:
        """The account the sender of `route` held on route `old` (a relay on its way re-attached),
        moved to `route`."""
        account = self.accounts.pop(old)
        self._resend.discard(old)
        account.queued = False  # its turn under the old route is skipped
        self.accounts[route] = account
        self._by_sender[_seen_by(route)] = route
        return account

    def _retire(self, route: Route | None) -> int:
        """Close the account of `route`, its credits back in the pool; how many it held."""
        account = self.accounts.pop(route, None) if route is not None else None
        if account is None:
            return 0
        if self._by_sender.get(_seen_by(route)) == route:
            del self._by_sender[_seen_by(route)]
        self.in_flight -= account.outstanding
        return account.outstanding

    def _queue(self, route: Route, account: _Account) -> None:
        if not account.queued and not account.dormant and account.outstanding < self.window(route):
            account.queued = True
            self._turns.append(route)
