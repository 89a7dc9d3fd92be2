"""The messages actors send the learner, built on the wire format of `comm/`.

`hello`: an actor process (re)started; its index, pid and host, so the learner can count restarts
and the actors connected per host.
`experience`: one policy's ExperienceBatch as arrays (meta `policy_id`, `main` when absent), plus
the episodes of its agents that ended and the env frames stepped since the previous message, and
every step of those of them recorded for the run file (`recorded_*` arrays; `recorded_index` says
which of the message's episodes each one is).
`env_failing`: the actor's environment raised in every recent episode; it stopped sampling and
says why (the error's type and message).
`gradients`: A3C's gradients of one rollout (one array per parameter, in the model's order), the
policy version they were computed with, and the same episode and frame counts.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from ..comm import Message
from ..mdp import ExperienceBatch, RecordedSteps
from .sampling import POLICY_ID

HELLO, EXPERIENCE, GRADIENTS, ENV_FAILING = "hello", "experience", "gradients", "env_failing"
KINDS = {HELLO, EXPERIENCE, GRADIENTS, ENV_FAILING}
_BATCH_FIELDS = tuple(field.name for field in fields(ExperienceBatch))
_RECORDED_STEP_FIELDS = ("observations", "actions", "rewards", "policy_versions")
#: A recorded episode of the message's episodes: (its index among them, its steps).
Recorded = tuple[int, RecordedSteps]


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
    recorded: tuple[Recorded, ...] = ()
    policy_id: str = POLICY_ID  # whose steps these are (a multi-agent run has several policies)


def experience_message(actor_index: int, batch: ExperienceBatch, episode_returns: np.ndarray,
                       episode_lengths: np.ndarray, env_frames: int, env_errors: int = 0,
                       sequence: int = -1, recorded: tuple[Recorded, ...] = (), policy_id: str = POLICY_ID) -> Message:
    arrays = {name: getattr(batch, name) for name in _BATCH_FIELDS}
    arrays["episode_returns"] = np.asarray(episode_returns, dtype=np.float64)
    arrays["episode_lengths"] = np.asarray(episode_lengths, dtype=np.int64)
    meta = {"actor_index": actor_index, "env_frames": env_frames, "env_errors": env_errors, "sequence": sequence,
            "policy_id": policy_id}
    if recorded:
        arrays["recorded_index"] = np.array([index for index, _ in recorded], dtype=np.int64)
        arrays["recorded_lengths"] = np.array([len(steps) for _, steps in recorded], dtype=np.int64)
        arrays["recorded_terminated"] = np.array([steps.terminated for _, steps in recorded], dtype=bool)
        for name in _RECORDED_STEP_FIELDS:
            arrays[f"recorded_{name}"] = np.concatenate([getattr(steps, name) for _, steps in recorded])
        meta["recorded_agent_ids"] = [steps.agent_id for _, steps in recorded]
    newest = int(batch.policy_versions.max()) if len(batch) else -1
    return Message(EXPERIENCE, f"actor-{actor_index}", newest, arrays, meta)


def _read_recorded(message: Message, episodes: int) -> tuple[Recorded, ...]:
    """The recorded episodes of an experience message, checked to add up; () when it has none."""
    arrays = message.arrays
    if "recorded_lengths" not in arrays:
        return ()
    lengths, indices = arrays["recorded_lengths"], arrays["recorded_index"]
    terminated, agent_ids = arrays["recorded_terminated"], list(message.meta["recorded_agent_ids"])
    steps = {name: arrays[f"recorded_{name}"] for name in _RECORDED_STEP_FIELDS}
    if not (len(lengths) == len(indices) == len(terminated) == len(agent_ids)) or (lengths < 1).any():
        raise ValueError("recorded episodes do not line up")
    if any(len(column) != int(lengths.sum()) for column in steps.values()):
        raise ValueError("recorded steps do not add up to their episodes")
    if ((indices < 0) | (indices >= episodes)).any() or not all(isinstance(agent, str) for agent in agent_ids):
        raise ValueError("recorded episodes name episodes the message does not have")
    ends = np.cumsum(lengths)
    return tuple((int(index), RecordedSteps(agent, *(column[end - length:end] for column in steps.values()),
                                            bool(done)))
                 for index, length, end, done, agent in zip(indices, lengths, ends, terminated, agent_ids))


#: Per-step and per-fragment arrays of a batch: each group has one length.
_STEP_FIELDS = ("observations", "actions", "log_probs", "rewards", "policy_versions")
_FRAGMENT_FIELDS = ("lengths", "terminated", "bootstrap_observations")


def _meta_int(message: Message, name: str, minimum: int, default: int | None = None) -> int:
    """An integer of the message's meta, of type int (not a string or float that int() would take)."""
    value = message.meta.get(name, default) if default is not None else message.meta[name]
    if type(value) is not int or value < minimum:
        raise ValueError(f"meta {name!r} must be an integer of at least {minimum}, got {value!r}")
    return value


def _check_batch(arrays: dict[str, np.ndarray]) -> None:
    """A batch whose arrays line up: a message can decode and still describe a batch whose arrays
    disagree (a bug in a sender, or a hostile key holder), which would stop the learner's update
    or poison it with NaN; such a message is refused here, naming what is wrong."""
    for group in (_STEP_FIELDS, _FRAGMENT_FIELDS, ("episode_returns", "episode_lengths")):
        for name in group:
            if arrays[name].ndim == 0:
                raise ValueError(f"experience array {name!r} is 0-d")
        sizes = {name: len(arrays[name]) for name in group}
        if len(set(sizes.values())) > 1:
            raise ValueError(f"experience arrays of different lengths: {sizes}")
    lengths = arrays["lengths"]
    if lengths.dtype.kind not in "iu" or (lengths < 1).any() or int(lengths.sum()) != len(arrays["rewards"]):
        raise ValueError("experience fragments do not add up to its steps")
    for name in ("observations", "bootstrap_observations", "log_probs", "rewards", "episode_returns"):
        if arrays[name].dtype.kind == "f" and not np.isfinite(arrays[name]).all():
            raise ValueError(f"experience array {name!r} holds NaN or infinite values")
    if arrays["observations"].shape[1:] != arrays["bootstrap_observations"].shape[1:]:
        raise ValueError(f"observations of shape {arrays['observations'].shape[1:]} but bootstrap observations "
                         f"of shape {arrays['bootstrap_observations'].shape[1:]}")


def read_experience(message: Message) -> ActorExperience:
    """Rebuild the batch; raises KeyError or ValueError on a message that lacks a field or whose
    fields do not fit together (`_check_batch`)."""
    arrays = message.arrays
    _check_batch({name: arrays[name] for name in (*_BATCH_FIELDS, "episode_returns", "episode_lengths")})
    batch = ExperienceBatch(**{name: arrays[name] for name in _BATCH_FIELDS})
    return ActorExperience(_meta_int(message, "actor_index", 0), batch, arrays["episode_returns"],
                           arrays["episode_lengths"], _meta_int(message, "env_frames", 0),
                           _meta_int(message, "env_errors", 0, 0), _meta_int(message, "sequence", -1, -1),
                           _read_recorded(message, len(arrays["episode_returns"])), _policy_id(message))


def _policy_id(message: Message) -> str:
    policy_id = message.meta.get("policy_id", POLICY_ID)
    if not isinstance(policy_id, str):
        raise ValueError(f"policy_id must be a string, got {type(policy_id).__name__}")
    return policy_id


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
