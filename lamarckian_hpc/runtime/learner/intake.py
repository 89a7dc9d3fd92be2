"""What a learner process does with the messages of its actors, whichever rank it is.

Hellos (a new or restarted actor process), environment failures, sequence gaps (lost messages),
malformed messages and experience too stale to train on are handled here the same way by the one
learner of a run (`distributed.DistributedTrainer`) and by every rank of a learner group
(`learner.ranks`), each on the messages of its own shard of the actors.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ...comm import ExperienceReceiver
from ...config import RunConfig
from ..messages import (
    ENV_FAILING,
    GRADIENTS,
    HELLO,
    ActorExperience,
    ActorGradients,
    MalformedMessage,
    MessageSpec,
    read_env_failing,
    read_experience,
    read_gradients,
    read_hello,
)
from .actor_watch import ActorWatch

log = logging.getLogger(__name__)

RECEIVE_POLL_MS = 50
#: A sender's malformed messages are logged once a minute at most (all are counted), and the
#: senders remembered for it are bounded: a peer cannot fill the log or the memory with them.
MALFORMED_LOG_SECONDS = 60.0
MALFORMED_LOG_SENDERS = 1024


class ExperienceIntake:
    """The receiving half of a learner process; the class that mixes it in sets the attributes below."""

    config: RunConfig
    receiver: ExperienceReceiver
    spec: MessageSpec  # what the run's messages must fit (`messages.MessageSpec`)
    watch: ActorWatch
    learner: Any
    hellos: dict[int, int]
    actor_pids: dict[int, int]
    actor_routes: dict[int, tuple[bytes, ...]]  # actor index -> the route its process's hello came by
    next_sequence: dict[int, int]  # actor index -> the sequence number expected next
    lost_messages: int
    dropped_stale_steps: int
    env_errors: int
    malformed_logged: dict[str, float]  # sender -> when its last malformed message was logged

    def _serve(self) -> None:
        """Work to do before each wait for a message (rank 0: serve late weight subscribers)."""

    def _while_waiting(self) -> None:
        """Nothing arrived within a poll."""

    def _next_message(self) -> ActorExperience | ActorGradients | None:
        """Serve late subscribers (`_serve`), then wait briefly for the next experience or gradients."""
        self._serve()
        message = self.receiver.receive(RECEIVE_POLL_MS)
        if message is None:
            self._while_waiting()
            return None
        try:
            if message.kind == HELLO:
                self._on_hello(*read_hello(message, self.spec))
                return None
            if message.kind == ENV_FAILING:
                index, error = read_env_failing(message, self.spec)
                self.watch.on_env_failing(index, error)
                log.error("actor %d stopped sampling: %s", index, error)
                return None
            item = (read_gradients(message, self.spec) if message.kind == GRADIENTS
                    else read_experience(message, self.spec))
        except MalformedMessage as error:
            self._drop_malformed(message.sender, message.kind, error)
            return None
        if (item.steps if isinstance(item, ActorGradients) else len(item.batch)) > 0:
            self.watch.on_experience()
        return item

    def _on_hello(self, index: int, pid: int, host: str) -> None:
        """An actor process said hello (a repeat, `announce`, counts once). A new process of an
        index that had one before is a restart: the old process's route is closed at once, its
        credits back in the pool and never granted again (they died with it; left to the reclaim,
        they would wait two minutes). The same process on a new route (a relay above it re-attached)
        keeps its account: its credit request takes it over (`comm.credits`)."""
        route = self.receiver.last_route
        if self.actor_pids.get(index) != pid:
            self.hellos[index] = self.hellos.get(index, 0) + 1
            self.watch.on_hello(index, host)
            self.next_sequence[index] = 0  # a new process numbers its messages from 0
            restarted = index in self.actor_pids
            self.actor_pids[index] = pid
            previous = self.actor_routes.get(index)
            if restarted and previous is not None and previous != route:
                self.receiver.ledger.close(previous)
        self.actor_routes[index] = route

    def _drop_malformed(self, sender: str, kind: str, error: MalformedMessage) -> None:
        """Count a message the run cannot use (`malformed_messages`); log it unless its sender's
        last was logged within MALFORMED_LOG_SECONDS."""
        self.receiver.malformed += 1
        sender, now = sender[:64], time.monotonic()
        logged = self.malformed_logged
        if now - logged.get(sender, -MALFORMED_LOG_SECONDS) < MALFORMED_LOG_SECONDS:
            return
        if len(logged) >= MALFORMED_LOG_SENDERS:
            for old in [name for name, at in logged.items() if now - at >= MALFORMED_LOG_SECONDS]:
                del logged[old]
            if len(logged) >= MALFORMED_LOG_SENDERS:
                return
        logged[sender] = now
        log.error("dropped a malformed %s message from %s (%d malformed messages in all): %s",
                  kind, sender, self.receiver.malformed, error)

    def _next_experience(self) -> ActorExperience | None:
        """`_next_message` when it is experience, its environment errors and sequence counted."""
        item = self._next_message()
        if not isinstance(item, ActorExperience):
            return None
        self.env_errors += item.env_errors
        self._check_sequence(item)
        return item

    def _check_sequence(self, item: ActorExperience) -> None:
        """Count messages that never arrived: a gap in an actor process's numbering. One that
        arrives after a later one (by another way through the tree) was counted in the gap it
        left: it is taken off again, and the numbering does not move back (which would count the
        messages after it as lost a second time)."""
        if item.sequence < 0:
            return
        expected = self.next_sequence.get(item.actor_index, 0)
        if item.sequence < expected:
            self.lost_messages = max(0, self.lost_messages - 1)
            return
        self.lost_messages += item.sequence - expected
        self.next_sequence[item.actor_index] = item.sequence + 1

    def counters(self) -> dict[str, float]:
        """This process's cumulative counters (`lockstep.COUNTERS`): what it received, lost and
        dropped, and its credit ledger's books."""
        ledger = self.receiver.ledger
        return {"dropped_stale_steps": self.dropped_stale_steps, "lost_messages": self.lost_messages,
                "malformed_messages": self.receiver.malformed, "env_errors": self.env_errors,
                "actors_connected": len(self.watch.hosts), "hosts_connected": len(set(self.watch.hosts.values())),
                "credits_in_flight": ledger.in_flight, "credits_written_off": ledger.written_off,
                "credits_late": ledger.late, "credits_reclaimed": ledger.reclaimed}

    def _fresh(self, oldest_version: int, steps: int, limit: int | None, version: int | None = None) -> bool:
        """Whether samples of `oldest_version` are within `limit` of `version` (the learner's by default)."""
        fresh = limit is None or (self.learner.version if version is None else version) - oldest_version <= limit
        if not fresh:
            self.dropped_stale_steps += steps
        return fresh

    def _accept(self, experience: ActorExperience, version: int) -> bool:
        """Whether to train on `experience`; `version` is its policy's current version."""
        versions = experience.batch.policy_versions
        if not len(versions):
            return False
        if int(versions.max()) > version:  # no actor samples with weights the learner has not made
            self._drop_malformed(f"actor-{experience.actor_index}", "experience", MalformedMessage(
                f"policy_versions: {int(versions.max())}, newer than the learner's {version}"))
            return False
        if self.config.runtime.sampling == "sync":
            return self._fresh(int(versions.min()), len(versions), 0, version)  # only the current version
        return self._fresh(int(versions.min()), len(versions), self.config.runtime.max_policy_lag, version)

