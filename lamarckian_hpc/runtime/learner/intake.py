"""What a learner process does with the messages of its actors, whichever rank it is.

Hellos (a new or restarted actor process), environment failures, sequence gaps (lost messages),
malformed messages and experience too stale to train on are handled here the same way by the one
learner of a run (`distributed.DistributedTrainer`) and by every rank of a learner group
(`learner.ranks`), each on the messages of its own shard of the actors.
"""

from __future__ import annotations

import logging
from typing import Any

import gymnasium as gym

from ...comm import ExperienceReceiver
from ...config import RunConfig
from ..actor_watch import ActorWatch
from ..messages import ENV_FAILING, GRADIENTS, HELLO, ActorExperience, ActorGradients, read_experience, read_gradients

log = logging.getLogger(__name__)

RECEIVE_POLL_MS = 50


class ExperienceIntake:
    """The receiving half of a learner process; the class that mixes it in sets the attributes below."""

    config: RunConfig
    spaces: tuple[gym.Space, gym.Space]  # a single-agent run's observation and action spaces
    receiver: ExperienceReceiver
    watch: ActorWatch
    learner: Any
    hellos: dict[int, int]
    actor_pids: dict[int, int]
    actor_routes: dict[int, tuple[bytes, ...]]  # actor index -> the route its process's hello came by
    next_sequence: dict[int, int]  # actor index -> the sequence number expected next
    lost_messages: int
    dropped_stale_steps: int
    env_errors: int

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
        if message.kind == HELLO:
            index = int(message.meta.get("actor_index", -1))
            self.hellos[index] = self.hellos.get(index, 0) + 1
            self.watch.on_hello(index, str(message.meta.get("host", "unknown")))
            self.next_sequence[index] = 0  # a new process numbers its messages from 0
            self.actor_pids[index] = int(message.meta.get("pid", -1))
            previous, self.actor_routes[index] = self.actor_routes.get(index), self.receiver.last_route
            if previous is not None and previous != self.receiver.last_route:
                self.receiver.ledger.write_off(previous)  # the old process's credits died with it
            return None
        if message.kind == ENV_FAILING:
            index = int(message.meta.get("actor_index", -1))
            self.watch.on_env_failing(index, str(message.meta.get("error", "an environment error")))
            log.error("actor %d stopped sampling: %s", index, message.meta.get("error"))
            return None
        try:
            item = read_gradients(message) if message.kind == GRADIENTS else read_experience(message)
            if item.actor_index not in self.watch.expected:
                raise ValueError(f"actor index {item.actor_index} is not one of this learner's actors")
            if isinstance(item, ActorExperience):
                self._check_fits(item)
        except (KeyError, ValueError, TypeError) as error:
            self.receiver.malformed += 1
            log.error("dropped a %s message from %s: %s", message.kind, message.sender, error)
            return None
        if (item.steps if isinstance(item, ActorGradients) else len(item.batch)) > 0:
            self.watch.on_experience()
        return item

    def _check_fits(self, item: ActorExperience) -> None:
        """Experience of this run's spaces, and of no policy version the learner has not made yet:
        what decodes and lines up can still not fit the model (another observation shape, an
        action out of range), and the update would fail on it. Raises ValueError naming the misfit."""
        versions = item.batch.policy_versions
        learner = getattr(self, "policy_learners", {}).get(item.policy_id, self.learner)
        if len(versions) and int(versions.max()) > learner.version:
            raise ValueError(f"experience of policy version {int(versions.max())}, newer than the learner's "
                             f"{learner.version}")
        if self.config.multiagent is not None:
            return  # a multi-agent message's rows are the policy's own, checked by its sampling
        observation_space, action_space = self.spaces
        observations, actions = item.batch.observations, item.batch.actions
        if isinstance(observation_space, gym.spaces.Box) and observations.shape[1:] != observation_space.shape:
            raise ValueError(f"observations of shape {observations.shape[1:]}, the run's are {observation_space.shape}")
        if isinstance(action_space, gym.spaces.Discrete):
            if actions.ndim != 1 or actions.dtype.kind not in "iu" or (
                    len(actions) and not (action_space.start <= actions.min() and
                                          actions.max() < action_space.start + action_space.n)):
                raise ValueError(f"actions outside the run's {action_space}")
        elif isinstance(action_space, gym.spaces.Box) and actions.shape[1:] != action_space.shape:
            raise ValueError(f"actions of shape {actions.shape[1:]}, the run's are {action_space.shape}")

    def _next_experience(self) -> ActorExperience | None:
        """`_next_message` when it is experience, its environment errors and sequence counted."""
        item = self._next_message()
        if not isinstance(item, ActorExperience):
            return None
        self.env_errors += item.env_errors
        self._check_sequence(item)
        return item

    def _check_sequence(self, item: ActorExperience) -> None:
        """Count messages that never arrived: a gap in an actor process's numbering."""
        if item.sequence < 0:
            return
        expected = self.next_sequence.get(item.actor_index, 0)
        if item.sequence > expected:
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
        if self.config.runtime.sampling == "sync":
            return self._fresh(int(versions.min()), len(versions), 0, version)  # only the current version
        return self._fresh(int(versions.min()), len(versions), self.config.runtime.max_policy_lag, version)

