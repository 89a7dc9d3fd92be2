"""Recorded episodes in the run file: every step of some finished episodes, one group per policy.

What a researcher needs to see what an agent did (its observations, actions and rewards, with the
policy version that chose each action), without replaying the run. Layout, for each policy id:

- ``/trajectories/<policy>/`` step rows, aligned: ``observations`` [rows, *obs] (uint8 for images
  and RAM bytes, float32 otherwise), ``actions`` [rows, *act] (int64 or float32), ``rewards``
  float32, ``terminated`` and ``truncated`` bool (set on an episode's last row only),
  ``policy_version`` int64, ``episode`` int64, ``step`` int64 (0 at the episode's first row) and
  ``agent_id`` (UTF-8, at most AGENT_ID_BYTES).
- ``/trajectories/<policy>/episodes/`` one row per episode: ``episode`` (the run's count of
  finished episodes when this one ended, from 0: the `episodes` metric's numbering), ``first_row``,
  ``length``, ``return`` (as the learner counted it), ``actor``, ``host``,
  ``policy_version_first``, ``policy_version_last``, ``env_frames`` and ``wall_time`` (the run's,
  when the episode was written), and the tags that say whose episode it is in a population run:
  ``member`` (the PBT member's id, as in ``/population``; the EMOGI policy's; the league
  learner's slot), ``generation`` (the PBT interval, EMOGI or league generation, as
  ``/population`` and the metrics count them) and ``opponent`` (UTF-8, at most OPPONENT_BYTES:
  the league member the learner played). A tag a run has no use for is -1 (``""`` for the
  opponent): a `train` run's episodes carry none. Files written before the tags existed read
  back with these defaults.

In a population run the numbers in ``episode`` count each member's own finished episodes (a PBT
slot's, an EMOGI policy's, a league learner's), so an episode is named by its member and number.

Like everything in an SWMR file, the datasets are created with the file (`create_trajectories`),
so the policies and their observation and action shapes are known up front. Step rows are written
before index rows, and readers keep only episodes whose rows are all there, so a reader that
catches a flush half-way, or a file whose writer was killed, shows whole episodes only.

Observations and actions are chunked and compressed with gzip at level 1 by default, measured on
20,000 rows each (the codec test of `benchmarks/costs/trajectory_cost.py`): image-Pong frames shrink 78x
at about 640 MiB/s (lzf: 48x at the same speed; gzip level 4: 126x at half of it), and CartPole's
float rows do not compress with any codec (1.1x) but cost a few milliseconds per 20,000 steps.
gzip is also the filter every HDF5 tool reads; lzf exists only in h5py. Fixed-length strings keep
every byte in the datasets' own chunks, none in HDF5's global heap.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import h5py
import numpy as np

TRAJECTORIES_GROUP = "trajectories"
EPISODES_GROUP = "episodes"
AGENT_ID_BYTES = 64
HOST_BYTES = 64
OPPONENT_BYTES = 64
#: The `member` and `generation` tag of an episode that has none (a `train` run's).
NO_TAG = -1
#: Target bytes of one chunk of a step dataset: a few episodes of CartPole, a few dozen image frames.
CHUNK_BYTES = 1 << 20
MAX_CHUNK_ROWS = 4096
EPISODE_CHUNK_ROWS = 256
COMPRESSIONS = ("gzip", "lzf", "none")
#: Deflate's largest possible ratio (about 1032:1): a dataset whose shape claims more bytes than
#: this times the file's size is damaged, not compressed.
LARGEST_COMPRESSION_RATIO = 1100

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrajectorySpec:
    """The shapes of one policy's recorded steps, known when the run file is created."""

    policy_id: str
    observation_shape: tuple[int, ...]
    observation_dtype: str  # "uint8" or "float32"
    action_shape: tuple[int, ...] = ()
    action_dtype: str = "int64"  # "int64" (discrete) or "float32" (continuous)


@dataclass(frozen=True)
class EpisodeRecord:
    """One finished episode to write: its steps and where and when it was played."""

    policy_id: str
    agent_id: str
    observations: np.ndarray  # [length, *obs]
    actions: np.ndarray  # [length, *act]
    rewards: np.ndarray  # [length]
    policy_versions: np.ndarray  # [length]
    terminated: bool  # the last step ended the episode (False: truncated, or the agent left)
    episode: int
    episode_return: float
    actor: int
    host: str
    env_frames: int
    wall_time: float
    member: int = NO_TAG  # whose episode, in a population run (see the module's docstring)
    generation: int = NO_TAG
    opponent: str = ""

    def __len__(self) -> int:
        return len(self.rewards)

    @property
    def nbytes(self) -> int:
        return sum(array.nbytes for array in (self.observations, self.actions, self.rewards, self.policy_versions))


def _fixed_string(length: int) -> np.dtype:
    return h5py.string_dtype("utf-8", length)


def _step_columns(spec: TrajectorySpec) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    return {
        "observations": (tuple(spec.observation_shape), np.dtype(spec.observation_dtype)),
        "actions": (tuple(spec.action_shape), np.dtype(spec.action_dtype)),
        "rewards": ((), np.dtype(np.float32)),
        "terminated": ((), np.dtype(bool)),
        "truncated": ((), np.dtype(bool)),
        "policy_version": ((), np.dtype(np.int64)),
        "episode": ((), np.dtype(np.int64)),
        "step": ((), np.dtype(np.int64)),
        "agent_id": ((), _fixed_string(AGENT_ID_BYTES)),
    }


EPISODE_COLUMNS: dict[str, np.dtype] = {
    "episode": np.dtype(np.int64), "first_row": np.dtype(np.int64), "length": np.dtype(np.int64),
    "return": np.dtype(np.float64), "actor": np.dtype(np.int64), "host": _fixed_string(HOST_BYTES),
    "policy_version_first": np.dtype(np.int64), "policy_version_last": np.dtype(np.int64),
    "env_frames": np.dtype(np.int64), "wall_time": np.dtype(np.float64),
    "member": np.dtype(np.int64), "generation": np.dtype(np.int64), "opponent": _fixed_string(OPPONENT_BYTES),
}
#: What a file written before the tags existed reads back for them.
TAG_DEFAULTS: dict[str, object] = {"member": NO_TAG, "generation": NO_TAG, "opponent": ""}


def _chunk_rows(inner: tuple[int, ...], dtype: np.dtype) -> int:
    row_bytes = max(1, math.prod(inner) * dtype.itemsize)
    return max(1, min(MAX_CHUNK_ROWS, CHUNK_BYTES // row_bytes))


def _checked_policy_id(policy_id: str) -> str:
    if not isinstance(policy_id, str) or not policy_id or "/" in policy_id or policy_id in (".", "..", EPISODES_GROUP):
        raise ValueError(f"invalid policy id {policy_id!r} for recorded trajectories: need a name without '/'")
    return policy_id


class TrajectoryTables:
    """The /trajectories datasets of a file being written: buffers episodes, writes them at flush,
    and stops recording (saying so once) when the stored bytes reach `max_bytes`."""

    def __init__(self, file: h5py.File, specs: list[TrajectorySpec], compression: str = "gzip",
                 max_bytes: int | None = None) -> None:
        if compression not in COMPRESSIONS:
            raise ValueError(f"trajectory compression {compression!r}: use one of {', '.join(COMPRESSIONS)}")
        options = {} if compression == "none" else {"compression": compression}
        if compression == "gzip":
            options["compression_opts"] = 1
        self.max_bytes = max_bytes
        self.stopped = False
        self.written_episodes = 0
        self._pending: list[EpisodeRecord] = []
        self._pending_bytes = 0
        self._stored_bytes = 0
        self._rows: dict[str, int] = {}
        self._steps: dict[str, dict[str, h5py.Dataset]] = {}
        self._episodes: dict[str, dict[str, h5py.Dataset]] = {}
        self._observation_shapes: dict[str, tuple[int, ...]] = {}
        root = file.create_group(TRAJECTORIES_GROUP)
        for spec in specs:
            group = root.create_group(_checked_policy_id(spec.policy_id))
            compressed = {"observations", "actions"}
            self._steps[spec.policy_id] = {
                name: group.create_dataset(name, shape=(0, *inner), maxshape=(None, *inner), dtype=dtype,
                                           chunks=(_chunk_rows(inner, dtype), *inner),
                                           **(options if name in compressed else {}))
                for name, (inner, dtype) in _step_columns(spec).items()
            }
            index = group.create_group(EPISODES_GROUP)
            self._episodes[spec.policy_id] = {
                name: index.create_dataset(name, shape=(0,), maxshape=(None,), dtype=dtype, chunks=(EPISODE_CHUNK_ROWS,))
                for name, dtype in EPISODE_COLUMNS.items()
            }
            self._rows[spec.policy_id] = 0
            self._observation_shapes[spec.policy_id] = tuple(spec.observation_shape)

    @property
    def policy_ids(self) -> list[str]:
        return list(self._steps)

    @property
    def stored_bytes(self) -> int:
        return self._stored_bytes + self._pending_bytes

    def add(self, record: EpisodeRecord) -> bool:
        """Buffer one episode for the next flush; False (and nothing kept) once recording stopped."""
        if record.policy_id not in self._steps:
            raise ValueError(f"no trajectory datasets for policy {record.policy_id!r}; "
                             f"the run file records {self.policy_ids}")
        if self.stopped or not len(record):
            return False
        declared = self._observation_shapes[record.policy_id]
        if record.observations.shape[1:] != declared:
            raise ValueError(f"a recorded episode of policy {record.policy_id!r} observes "
                             f"{record.observations.shape[1:]} per step; the run file declared {declared}")
        if self.max_bytes is not None and self.stored_bytes + record.nbytes > self.max_bytes:
            self.stopped = True
            log.warning("recorded trajectories reached storage.trajectories.max_megabytes=%g (%d episodes); "
                        "recording stops, training goes on", self.max_bytes / 2**20, self.written_episodes)
            return False
        self._pending.append(record)
        self._pending_bytes += record.nbytes
        return True

    def flush(self) -> None:
        """Write the buffered episodes: step rows first, then their index rows."""
        if not self._pending:
            return
        by_policy: dict[str, list[EpisodeRecord]] = {}
        for record in self._pending:
            by_policy.setdefault(record.policy_id, []).append(record)
        for policy_id, records in by_policy.items():
            first = self._rows[policy_id]
            starts = first + np.cumsum([0, *(len(r) for r in records[:-1])])
            self._append(self._steps[policy_id], _step_rows(records))
            self._append(self._episodes[policy_id], _index_rows(records, starts))
            self._rows[policy_id] = first + sum(len(r) for r in records)
        self.written_episodes += len(self._pending)
        self._pending.clear()
        self._pending_bytes = 0
        self._stored_bytes = sum(dataset.id.get_storage_size() for datasets in self._steps.values()
                                 for dataset in datasets.values())

    @staticmethod
    def _append(datasets: dict[str, h5py.Dataset], rows: dict[str, np.ndarray]) -> None:
        for name, dataset in datasets.items():
            column = np.asarray(rows[name], dtype=dataset.dtype)
            old = dataset.shape[0]
            dataset.resize((old + len(column), *dataset.shape[1:]))
            dataset[old:] = column


def _step_rows(records: list[EpisodeRecord]) -> dict[str, np.ndarray]:
    lengths = [len(record) for record in records]
    last = np.zeros(sum(lengths), dtype=bool)
    last[np.cumsum(lengths) - 1] = True
    terminated_episode = np.repeat([record.terminated for record in records], lengths)
    return {
        "observations": np.concatenate([record.observations for record in records]),
        "actions": np.concatenate([record.actions for record in records]),
        "rewards": np.concatenate([record.rewards for record in records]).astype(np.float32),
        "terminated": last & terminated_episode,
        "truncated": last & ~terminated_episode,
        "policy_version": np.concatenate([record.policy_versions for record in records]).astype(np.int64),
        "episode": np.repeat([record.episode for record in records], lengths).astype(np.int64),
        "step": np.concatenate([np.arange(length, dtype=np.int64) for length in lengths]),
        "agent_id": np.repeat([record.agent_id.encode()[:AGENT_ID_BYTES] for record in records], lengths),
    }


def _index_rows(records: list[EpisodeRecord], starts: np.ndarray) -> dict[str, np.ndarray]:
    return {
        "episode": np.array([record.episode for record in records], dtype=np.int64),
        "first_row": np.asarray(starts, dtype=np.int64),
        "length": np.array([len(record) for record in records], dtype=np.int64),
        "return": np.array([record.episode_return for record in records], dtype=np.float64),
        "actor": np.array([record.actor for record in records], dtype=np.int64),
        "host": np.array([record.host.encode()[:HOST_BYTES] for record in records]),
        "policy_version_first": np.array([int(record.policy_versions[0]) for record in records], dtype=np.int64),
        "policy_version_last": np.array([int(record.policy_versions[-1]) for record in records], dtype=np.int64),
        "env_frames": np.array([record.env_frames for record in records], dtype=np.int64),
        "wall_time": np.array([record.wall_time for record in records], dtype=np.float64),
        "member": np.array([record.member for record in records], dtype=np.int64),
        "generation": np.array([record.generation for record in records], dtype=np.int64),
        "opponent": np.array([record.opponent.encode()[:OPPONENT_BYTES] for record in records]),
    }


# ---------------------------------------------------------------------------------------- reading
def trajectory_policies(file: h5py.File) -> list[str]:
    """Policies the file has trajectory datasets for ([] for runs that record none)."""
    return list(file[TRAJECTORIES_GROUP]) if TRAJECTORIES_GROUP in file else []


def _strings(values: np.ndarray) -> np.ndarray:
    return np.array([value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
                     for value in values], dtype=object)


def read_episode_index(file: h5py.File, policy_id: str,
                       check: Callable[[h5py.Dataset, int], None] | None = None) -> dict[str, np.ndarray]:
    """The index rows of every episode whose steps are all in the file (see the module's docstring)."""
    group = file[TRAJECTORIES_GROUP][policy_id]
    index = group[EPISODES_GROUP]
    for dataset in index.values():
        dataset.refresh()
    length = min(dataset.shape[0] for dataset in index.values())
    for dataset in index.values():
        if check is not None:
            check(dataset, length)
    rows = {name: dataset[:length] for name, dataset in index.items()}
    for name, default in TAG_DEFAULTS.items():  # a file from before the tags
        if name not in rows:
            rows[name] = np.full(length, default, dtype=object if isinstance(default, str) else np.int64)
    rows["host"] = _strings(rows["host"])
    rows["opponent"] = _strings(rows["opponent"])
    step_datasets = [group[name] for name in group if name != EPISODES_GROUP]
    for dataset in step_datasets:
        dataset.refresh()
    complete = rows["first_row"] + rows["length"] <= min(dataset.shape[0] for dataset in step_datasets)
    return {name: values[complete] for name, values in rows.items()}


def read_episode_steps(file: h5py.File, policy_id: str, first_row: int, length: int,
                       check: Callable[[int], None] | None = None,
                       names: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
    """The step rows [first_row, first_row + length) of `policy_id` (of the columns `names`, or
    all); `check(bytes)` may refuse the read (a damaged index claiming more than the file could hold)."""
    group = file[TRAJECTORIES_GROUP][policy_id]
    names = list(names) if names is not None else [name for name in group if name != EPISODES_GROUP]
    if check is not None:
        row_bytes = sum(math.prod(group[name].shape[1:]) * group[name].dtype.itemsize for name in names)
        check(int(length) * row_bytes)
    steps = {}
    for name in names:
        dataset = group[name]
        dataset.refresh()
        if first_row < 0 or first_row + length > dataset.shape[0]:
            raise ValueError(f"rows {first_row}..{first_row + length} of {dataset.name} are not in the file")
        steps[name] = dataset[first_row:first_row + length]
    if "agent_id" in steps:
        steps["agent_id"] = _strings(steps["agent_id"])
    return steps
