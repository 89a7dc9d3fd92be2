"""The messages actors send the learner, built on the wire format of `comm/`.

`hello`: an actor process (re)started; its index and pid, so the learner can count restarts.
`experience`: an ExperienceBatch as arrays, plus the episodes that ended and the env frames
stepped since the previous message.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from ..comm import Message
from ..mdp import ExperienceBatch

HELLO, EXPERIENCE = "hello", "experience"
KINDS = {HELLO, EXPERIENCE}
_BATCH_FIELDS = tuple(field.name for field in fields(ExperienceBatch))


def hello_message(actor_index: int, pid: int) -> Message:
    return Message(HELLO, f"actor-{actor_index}", -1, {}, {"actor_index": actor_index, "pid": pid})


@dataclass(frozen=True)
class ActorExperience:
    actor_index: int
    batch: ExperienceBatch
    episode_returns: np.ndarray
    episode_lengths: np.ndarray
    env_frames: int


def experience_message(actor_index: int, batch: ExperienceBatch, episode_returns: np.ndarray,
                       episode_lengths: np.ndarray, env_frames: int) -> Message:
    arrays = {name: getattr(batch, name) for name in _BATCH_FIELDS}
    arrays["episode_returns"] = np.asarray(episode_returns, dtype=np.float64)
    arrays["episode_lengths"] = np.asarray(episode_lengths, dtype=np.int64)
    newest = int(batch.policy_versions.max()) if len(batch) else -1
    return Message(EXPERIENCE, f"actor-{actor_index}", newest, arrays,
                   {"actor_index": actor_index, "env_frames": env_frames})


def read_experience(message: Message) -> ActorExperience:
    """Rebuild the batch; raises KeyError or ValueError on a message that lacks a field."""
    arrays = message.arrays
    batch = ExperienceBatch(**{name: arrays[name] for name in _BATCH_FIELDS})
    if int(batch.lengths.sum()) != len(batch) or len(batch.terminated) != len(batch.lengths):
        raise ValueError("experience fragments do not add up to its steps")
    return ActorExperience(int(message.meta["actor_index"]), batch, arrays["episode_returns"],
                           arrays["episode_lengths"], int(message.meta["env_frames"]))


def concatenate(batches: list[ExperienceBatch]) -> ExperienceBatch:
    """Lay several batches end to end (their fragments stay separate)."""
    return ExperienceBatch(**{name: np.concatenate([getattr(b, name) for b in batches]) for name in _BATCH_FIELDS})
