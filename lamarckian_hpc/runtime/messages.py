"""The messages actors send the learner, built on the wire format of `comm/`.

`hello`: an actor process (re)started; its index, pid and host, so the learner can count restarts
and the actors connected per host.
`experience`: an ExperienceBatch as arrays, plus the episodes that ended and the env frames
stepped since the previous message.
`env_failing`: the actor's environment raised in every recent episode; it stopped sampling and
says why (the error's type and message).
`gradients`: A3C's gradients of one rollout (one array per parameter, in the model's order), the
policy version they were computed with, and the same episode and frame counts.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from ..comm import Message
from ..mdp import ExperienceBatch

HELLO, EXPERIENCE, GRADIENTS, ENV_FAILING = "hello", "experience", "gradients", "env_failing"
KINDS = {HELLO, EXPERIENCE, GRADIENTS, ENV_FAILING}
_BATCH_FIELDS = tuple(field.name for field in fields(ExperienceBatch))


def hello_message(actor_index: int, pid: int, host: str) -> Message:
    return Message(HELLO, f"actor-{actor_index}", -1, {}, {"actor_index": actor_index, "pid": pid, "host": host})


def env_failing_message(actor_index: int, error: str) -> Message:
    return Message(ENV_FAILING, f"actor-{actor_index}", -1, {}, {"actor_index": actor_index, "error": error})


@dataclass(frozen=True)
class ActorExperience:
    actor_index: int
    batch: ExperienceBatch
    episode_returns: np.ndarray
    episode_lengths: np.ndarray
    env_frames: int
    env_errors: int = 0  # episodes dropped since the previous message because the environment raised
    sequence: int = -1  # the actor process's message count: a gap means a lost message


def experience_message(actor_index: int, batch: ExperienceBatch, episode_returns: np.ndarray,
                       episode_lengths: np.ndarray, env_frames: int, env_errors: int = 0,
                       sequence: int = -1) -> Message:
    arrays = {name: getattr(batch, name) for name in _BATCH_FIELDS}
    arrays["episode_returns"] = np.asarray(episode_returns, dtype=np.float64)
    arrays["episode_lengths"] = np.asarray(episode_lengths, dtype=np.int64)
    newest = int(batch.policy_versions.max()) if len(batch) else -1
    return Message(EXPERIENCE, f"actor-{actor_index}", newest, arrays,
                   {"actor_index": actor_index, "env_frames": env_frames, "env_errors": env_errors,
                    "sequence": sequence})


def read_experience(message: Message) -> ActorExperience:
    """Rebuild the batch; raises KeyError or ValueError on a message that lacks a field."""
    arrays = message.arrays
    batch = ExperienceBatch(**{name: arrays[name] for name in _BATCH_FIELDS})
    if int(batch.lengths.sum()) != len(batch) or len(batch.terminated) != len(batch.lengths):
        raise ValueError("experience fragments do not add up to its steps")
    return ActorExperience(int(message.meta["actor_index"]), batch, arrays["episode_returns"],
                           arrays["episode_lengths"], int(message.meta["env_frames"]),
                           int(message.meta.get("env_errors", 0)), int(message.meta.get("sequence", -1)))


def concatenate(batches: list[ExperienceBatch]) -> ExperienceBatch:
    """Lay several batches end to end (their fragments stay separate)."""
    return ExperienceBatch(**{name: np.concatenate([getattr(b, name) for b in batches]) for name in _BATCH_FIELDS})


@dataclass(frozen=True)
class ActorGradients:
    actor_index: int
    policy_version: int
    gradients: list[np.ndarray]
    steps: int
    episode_returns: np.ndarray
    episode_lengths: np.ndarray
    env_frames: int
    diagnostics: dict[str, float]
    env_errors: int = 0


def gradients_message(actor_index: int, policy_version: int, gradients: list[np.ndarray], steps: int,
                      episode_returns: np.ndarray, episode_lengths: np.ndarray, env_frames: int,
                      diagnostics: dict[str, float], env_errors: int = 0) -> Message:
    arrays = {f"gradient_{index}": gradient for index, gradient in enumerate(gradients)}
    arrays["episode_returns"] = np.asarray(episode_returns, dtype=np.float64)
    arrays["episode_lengths"] = np.asarray(episode_lengths, dtype=np.int64)
    meta = {"actor_index": actor_index, "env_frames": env_frames, "steps": steps, "diagnostics": diagnostics,
            "env_errors": env_errors}
    return Message(GRADIENTS, f"actor-{actor_index}", policy_version, arrays, meta)


def read_gradients(message: Message) -> ActorGradients:
    arrays = message.arrays
    count = sum(1 for name in arrays if name.startswith("gradient_"))
    diagnostics = {str(k): float(v) for k, v in dict(message.meta.get("diagnostics", {})).items()}
    return ActorGradients(int(message.meta["actor_index"]), message.policy_version,
                          [arrays[f"gradient_{index}"] for index in range(count)], int(message.meta["steps"]),
                          arrays["episode_returns"], arrays["episode_lengths"], int(message.meta["env_frames"]),
                          diagnostics, int(message.meta.get("env_errors", 0)))
