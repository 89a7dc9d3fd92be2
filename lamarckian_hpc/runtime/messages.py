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

The wire format (`comm.wire`) guarantees only that a message is well formed. Its readers here
check everything else before the learner uses any of it, against the run (`MessageSpec`): every
meta field of the right type and within bounds, no field missing or unknown, arrays of the right
dtype and number of dimensions that line up with each other and with the run's spaces, and finite
numbers wherever the maths needs them. Any message that fails raises `MalformedMessage` naming the
field, and the learner drops and counts it; a message that passes cannot fail later, inside
`concatenate` or an update.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import gymnasium as gym
import numpy as np

from ..comm import Message
from ..comm.channels import CREDIT
from ..mdp import ExperienceBatch, RecordedSteps
from .run_shape import POLICY_ID

HELLO, EXPERIENCE, GRADIENTS, ENV_FAILING = "hello", "experience", "gradients", "env_failing"
KINDS = {HELLO, EXPERIENCE, GRADIENTS, ENV_FAILING}
_BATCH_FIELDS = tuple(field.name for field in fields(ExperienceBatch))
_RECORDED_STEP_FIELDS = ("observations", "actions", "rewards", "policy_versions")
#: A recorded episode of the message's episodes: (its index among them, its steps).
Recorded = tuple[int, RecordedSteps]
#: Bounds of what one message says: counts (frames, steps, errors, sequence numbers, versions) far
#: above any real message's and far below an int64's; actor indices without a run's spec; text.
MAX_COUNT = 1 << 40
MAX_ACTORS = 1 << 20
MAX_NAME_CHARS = 64  # policy and agent ids, diagnostics' names
MAX_HOST_CHARS = 255
MAX_ERROR_CHARS = 4096
MAX_DIAGNOSTICS = 64


class MalformedMessage(ValueError):
    """A message well formed on the wire whose content this run cannot use; the text names the field.
    The learner drops it and counts it in `malformed_messages`."""


@dataclass(frozen=True)
class MessageSpec:
    """What the messages of one run must fit: its actors, the rows and actions of its experience,
    the observations of its recorded steps (a multi-agent run records each agent's own observation,
    and sends rows of own observation | global state), its trained policies, and for a run whose
    actors send gradients (A3C) the shape of every parameter of the model, in order."""

    num_actors: int
    observation_shape: tuple[int, ...]
    observation_uint8: bool  # uint8 observations stay uint8 (images); any other Box travels as floats
    action_shape: tuple[int, ...]
    action_range: tuple[int, int] | None  # a discrete action's [low, high); None: a Box action, floats
    recorded_observation_shape: tuple[int, ...]
    policies: frozenset[str] = frozenset({POLICY_ID})
    gradient_shapes: tuple[tuple[int, ...], ...] | None = None  # None: the actors send experience

    @classmethod
    def of(cls, num_actors: int, spaces: tuple[gym.Space, gym.Space], recorded_observations: gym.Space | None = None,
           policies: Iterable[str] = (POLICY_ID,),
           gradient_shapes: Iterable[Sequence[int]] | None = None) -> MessageSpec:
        """The spec of a run whose messages carry rows of `spaces` (observation, action)."""
        observation_space, action_space = spaces
        discrete = isinstance(action_space, gym.spaces.Discrete)
        start = int(action_space.start) if discrete else 0
        return cls(int(num_actors), tuple(observation_space.shape), observation_space.dtype == np.uint8,
                   () if discrete else tuple(action_space.shape),
                   (start, start + int(action_space.n)) if discrete else None,
                   tuple((recorded_observations or observation_space).shape), frozenset(policies),
                   None if gradient_shapes is None else tuple(tuple(map(int, shape)) for shape in gradient_shapes))


def _show(value: Any) -> str:
    """A value as the error names it: short, whatever a sender put there."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _only(what: str, names: Iterable[Any], allowed: Sequence[str]) -> None:
    """Refuse any field but `allowed` (meta keys may even be bytes)."""
    unknown = next((name for name in names if name not in allowed), None)
    if unknown is not None:
        raise MalformedMessage(f"{what}: unknown field {_show(unknown)}")


def _int(meta: Mapping[str, Any], name: str, low: int, high: int, default: int | None = None) -> int:
    value = meta.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not low <= value < high:
        raise MalformedMessage(f"{name}: {_show(value)} is not an integer in [{low}, {high})")
    return int(value)


def _text(meta: Mapping[str, Any], name: str, limit: int, default: str | None = None) -> str:
    value = meta.get(name, default)
    if not isinstance(value, str) or not 0 < len(value) <= limit:
        raise MalformedMessage(f"{name}: {_show(value)} is not a string of 1 to {limit} characters")
    return value


def _array(arrays: Mapping[str, np.ndarray], name: str, kinds: str, shape: tuple[Any, ...]) -> np.ndarray:
    """arrays[name], checked: a dtype of one of `kinds` (numpy's: f float, i signed integer, u unsigned,
    b bool), `shape` (None: any length; a last `...`: any further dimensions), and finite when it
    holds floats."""
    array = arrays.get(name)
    if array is None:
        raise MalformedMessage(f"{name}: missing")
    if array.dtype.kind not in kinds:
        raise MalformedMessage(f"{name}: dtype {array.dtype}, expected one of numpy's kinds {kinds!r}")
    rest = bool(shape) and shape[-1] is Ellipsis
    dims = shape[:-1] if rest else shape
    if (array.ndim < len(dims) if rest else array.ndim != len(dims)) or any(
            n is not None and n != m for n, m in zip(dims, array.shape)):
        expected = ", ".join("any" if n is None else "..." if n is Ellipsis else str(n) for n in shape)
        raise MalformedMessage(f"{name}: shape {array.shape}, expected ({expected})")
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        raise MalformedMessage(f"{name}: holds NaN or infinity")
    return array


def _within(name: str, array: np.ndarray, low: int, high: int) -> np.ndarray:
    if array.size and (array.min() < low or array.max() >= high):
        raise MalformedMessage(f"{name}: values outside [{low}, {high})")
    return array


def _observations(arrays: Mapping[str, np.ndarray], name: str, rows: int | None, shape: tuple[int, ...] | None,
                  uint8: bool) -> np.ndarray:
    """Rows of observations, each of `shape` (any, without a spec), uint8 or floats as the run's
    space says (either, without a spec)."""
    array = _array(arrays, name, "uf" if shape is None else "u" if uint8 else "f", (rows, *(shape or (...,))))
    if array.dtype.kind == "u" and array.dtype != np.uint8:
        raise MalformedMessage(f"{name}: dtype {array.dtype}, expected uint8")
    return array


def _actions(arrays: Mapping[str, np.ndarray], name: str, rows: int | None, spec: MessageSpec | None) -> np.ndarray:
    """Discrete actions (integers within the space) or a Box's (floats of its shape)."""
    if spec is None:
        return _array(arrays, name, "if", (rows, ...))
    if spec.action_range is None:
        return _array(arrays, name, "f", (rows, *spec.action_shape))
    return _within(name, _array(arrays, name, "i", (rows,)), *spec.action_range)


def _actor_index(meta: Mapping[str, Any], spec: MessageSpec | None) -> int:
    return _int(meta, "actor_index", 0, MAX_ACTORS if spec is None else spec.num_actors)


def hello_message(actor_index: int, pid: int, host: str) -> Message:
    return Message(HELLO, f"actor-{actor_index}", -1, {}, {"actor_index": actor_index, "pid": pid, "host": host})


def read_hello(message: Message, spec: MessageSpec | None = None) -> tuple[int, int, str]:
    """(actor index, pid, host) of a hello; raises MalformedMessage."""
    meta = message.meta
    _only("hello's arrays", message.arrays, ())
    _only("hello", meta, ("actor_index", "pid", "host"))
    return _actor_index(meta, spec), _int(meta, "pid", 0, 1 << 32), _text(meta, "host", MAX_HOST_CHARS)


def env_failing_message(actor_index: int, error: str) -> Message:
    return Message(ENV_FAILING, f"actor-{actor_index}", -1, {},
                   {"actor_index": actor_index, "error": error[:MAX_ERROR_CHARS] or "an environment error"})


def read_env_failing(message: Message, spec: MessageSpec | None = None) -> tuple[int, str]:
    """(actor index, error) of an env_failing message; raises MalformedMessage."""
    meta = message.meta
    _only("env_failing's arrays", message.arrays, ())
    _only("env_failing", meta, ("actor_index", "error"))
    return _actor_index(meta, spec), _text(meta, "error", MAX_ERROR_CHARS)


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


_EXPERIENCE_META = ("actor_index", "env_frames", "env_errors", "sequence", "policy_id", "recorded_agent_ids", CREDIT)
_EXPERIENCE_ARRAYS = (*_BATCH_FIELDS, "episode_returns", "episode_lengths")
_RECORDED_ARRAYS = ("recorded_index", "recorded_lengths", "recorded_terminated",
                    *(f"recorded_{name}" for name in _RECORDED_STEP_FIELDS))


def _episodes(arrays: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The returns and lengths of the episodes that ended: as many of each, finite, lengths >= 0."""
    returns = _array(arrays, "episode_returns", "f", (None,))
    return returns, _within("episode_lengths", _array(arrays, "episode_lengths", "i", (len(returns),)), 0, MAX_COUNT)


def _counts(meta: Mapping[str, Any]) -> tuple[int, int]:
    """The env frames stepped and the episodes dropped (environment errors) since the previous message."""
    return _int(meta, "env_frames", 0, MAX_COUNT), _int(meta, "env_errors", 0, MAX_COUNT, 0)


def _fragments(arrays: Mapping[str, np.ndarray], name: str, steps: int) -> np.ndarray:
    """Lengths of fragments or episodes laid end to end over `steps` rows: each in [1, steps], so
    that their sum cannot overflow into one that adds up, and adding up to `steps`."""
    lengths = _within(name, _array(arrays, name, "i", (None,)), 1, steps + 1)
    if int(lengths.sum()) != steps:
        raise MalformedMessage(f"{name}: {int(lengths.sum())} steps in all, for {steps} steps")
    return lengths


def _read_recorded(message: Message, episodes: int, spec: MessageSpec | None) -> tuple[Recorded, ...]:
    """The recorded episodes of an experience message, checked to add up; () when it has none."""
    arrays, meta = message.arrays, message.meta
    if not any(name in arrays for name in _RECORDED_ARRAYS) and "recorded_agent_ids" not in meta:
        return ()
    rewards = _array(arrays, "recorded_rewards", "f", (None,))
    steps = len(rewards)
    lengths = _fragments(arrays, "recorded_lengths", steps)
    count = len(lengths)
    indices = _within("recorded_index", _array(arrays, "recorded_index", "i", (count,)), 0, episodes)
    terminated = _array(arrays, "recorded_terminated", "b", (count,))
    agent_ids = meta.get("recorded_agent_ids")
    if not (isinstance(agent_ids, list) and len(agent_ids) == count
            and all(isinstance(agent, str) and 0 < len(agent) <= MAX_NAME_CHARS for agent in agent_ids)):
        raise MalformedMessage(f"recorded_agent_ids: not a list of {count} names of 1 to {MAX_NAME_CHARS} characters")
    columns = (_observations(arrays, "recorded_observations", steps,
                             None if spec is None else spec.recorded_observation_shape,
                             spec is not None and spec.observation_uint8),
               _actions(arrays, "recorded_actions", steps, spec), rewards,
               _within("recorded_policy_versions", _array(arrays, "recorded_policy_versions", "i", (steps,)),
                       0, MAX_COUNT))
    ends = np.cumsum(lengths)
    return tuple((int(index), RecordedSteps(agent, *(column[end - length:end] for column in columns), bool(done)))
                 for index, length, end, done, agent in zip(indices, lengths, ends, terminated, agent_ids))


def read_experience(message: Message, spec: MessageSpec | None = None) -> ActorExperience:
    """Rebuild an experience message, every field checked (against the run's actors, spaces and
    policies with `spec`); raises MalformedMessage naming the first field that is wrong."""
    arrays, meta = message.arrays, message.meta
    if spec is not None and spec.gradient_shapes is not None:
        raise MalformedMessage("experience: this run's actors send gradients")
    _only("experience", meta, _EXPERIENCE_META)
    _only("experience's arrays", arrays, (*_EXPERIENCE_ARRAYS, *_RECORDED_ARRAYS))
    actor_index, policy_id = _actor_index(meta, spec), _text(meta, "policy_id", MAX_NAME_CHARS, POLICY_ID)
    if spec is not None and policy_id not in spec.policies:
        raise MalformedMessage(f"policy_id: {policy_id!r} is not a policy this learner trains {sorted(spec.policies)}")
    env_frames, env_errors = _counts(meta)
    sequence = _int(meta, "sequence", -1, MAX_COUNT, -1)
    rewards = _array(arrays, "rewards", "f", (None,))
    steps = len(rewards)
    lengths = _fragments(arrays, "lengths", steps)
    shape = None if spec is None else spec.observation_shape
    uint8 = spec is not None and spec.observation_uint8
    batch = ExperienceBatch(
        observations=_observations(arrays, "observations", steps, shape, uint8),
        actions=_actions(arrays, "actions", steps, spec), log_probs=_array(arrays, "log_probs", "f", (steps,)),
        rewards=rewards,
        policy_versions=_within("policy_versions", _array(arrays, "policy_versions", "i", (steps,)), 0, MAX_COUNT),
        lengths=lengths, terminated=_array(arrays, "terminated", "b", (len(lengths),)),
        bootstrap_observations=_observations(arrays, "bootstrap_observations", len(lengths), shape, uint8))
    if spec is None and (batch.observations.shape[1:] != batch.bootstrap_observations.shape[1:]
                         or batch.observations.dtype != batch.bootstrap_observations.dtype):
        raise MalformedMessage("bootstrap_observations: unlike the observations")
    returns, episode_lengths = _episodes(arrays)
    return ActorExperience(actor_index, batch, returns, episode_lengths, env_frames, env_errors, sequence,
                           _read_recorded(message, len(returns), spec), policy_id)


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


def read_gradients(message: Message, spec: MessageSpec | None = None) -> ActorGradients:
    """Rebuild a gradients message, every field checked (with `spec`: one finite array of each
    parameter's shape, in the model's order); raises MalformedMessage naming the first field that is wrong."""
    arrays, meta = message.arrays, message.meta
    if spec is not None and spec.gradient_shapes is None:
        raise MalformedMessage("gradients: this run's actors send experience")
    _only("gradients", meta, ("actor_index", "env_frames", "steps", "diagnostics", "env_errors", CREDIT))
    count = sum(1 for name in arrays if name.startswith("gradient_"))
    if spec is not None and count != len(spec.gradient_shapes):
        raise MalformedMessage(f"gradients: {count} arrays for the model's {len(spec.gradient_shapes)} parameters")
    names = [f"gradient_{index}" for index in range(count)]
    _only("gradients' arrays", arrays, (*names, "episode_returns", "episode_lengths"))
    gradients = [_array(arrays, name, "f", (...,) if spec is None else spec.gradient_shapes[index])
                 for index, name in enumerate(names)]
    diagnostics = meta.get("diagnostics", {})
    if not (isinstance(diagnostics, dict) and len(diagnostics) <= MAX_DIAGNOSTICS and all(
            isinstance(name, str) and len(name) <= MAX_NAME_CHARS and isinstance(value, (int, float))
            and not isinstance(value, bool) and np.isfinite(value) for name, value in diagnostics.items())):
        raise MalformedMessage(f"diagnostics: not a map of at most {MAX_DIAGNOSTICS} names to finite numbers")
    if not 0 <= message.policy_version < MAX_COUNT:
        raise MalformedMessage(f"policy_version: {message.policy_version} is not in [0, {MAX_COUNT})")
    returns, lengths = _episodes(arrays)
    env_frames, env_errors = _counts(meta)
    return ActorGradients(_actor_index(meta, spec), message.policy_version, gradients,
                          _int(meta, "steps", 0, MAX_COUNT), returns, lengths, env_frames,
                          {name: float(value) for name, value in diagnostics.items()}, env_errors)
