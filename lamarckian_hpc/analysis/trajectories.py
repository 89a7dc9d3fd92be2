"""Recorded episodes (/trajectories): what the agent did, not only how well it did. Per run and
policy: the distribution of episode returns and lengths, how the choice of actions changed as the
policy was trained (one histogram per range of policy versions), and the reward of every step of a
few chosen episodes. `trajectory_analysis` is the topic that `analysis/trajectories.py` and
`lamarckian-hpc report` both draw.

Episodes of a population run (PBT, EMOGI, a league) carry tags: the member that played, the
generation and the opponent (`storage.trajectories`). An `EpisodeTags` filter keeps the episodes of
one member, generation or opponent; the table has a row per run, policy, member and opponent, and
the figures' CSV rows carry the tags.

Only whole episodes are drawn (`RunReader.episodes` keeps those whose steps are all in the file),
so a growing or killed run shows what it recorded up to its last flush. The action histograms read
only the actions and policy versions of the steps, never the observations: an image run's frames
are most of its file, and a histogram needs none of them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from lamarckian_hpc.storage import open_run

from .loader import MissingDataError, Requirement, RunData, RunFileError
from .plotting import Analysis, FigureResult, new_figure, save

WRITTEN_BY = "`storage.trajectories.every_episodes` > 0 in train, PBT, EMOGI and league runs"
NEEDS = Requirement("recorded episodes (/trajectories)", WRITTEN_BY, lambda run: any(run.trajectories.values()))
#: Ranges of policy versions the action histograms are split into (fewer when fewer versions acted).
VERSION_BUCKETS = 4
MAX_BINS = 30
TABLE_COLUMNS = ["run", "policy", "member", "opponent", "generation_first", "generation_last", "episodes", "steps",
                 "return_mean", "return_min", "return_max", "length_mean", "version_first", "version_last", "versions"]


def policy_requirement(policy: str) -> Requirement:
    """What a run needs for the figures of one named policy (`--policy`)."""
    return Requirement(f"recorded episodes of policy {policy!r} (/trajectories/{policy})", WRITTEN_BY,
                       lambda run: run.trajectories.get(policy, 0) > 0)


@dataclass(frozen=True)
class EpisodeTags:
    """Which recorded episodes to draw by their tags (None: any): a member's, a generation's, those
    against an opponent. A `train` run's episodes have member and generation -1 and no opponent."""

    member: int | None = None
    generation: int | None = None
    opponent: str | None = None

    def mask(self, index: dict[str, np.ndarray]) -> np.ndarray:
        keep = np.ones(len(index["episode"]), dtype=bool)
        for name in ("member", "generation", "opponent"):
            wanted = getattr(self, name)
            if wanted is not None:
                keep &= np.asarray(index[name]) == wanted
        return keep

    @property
    def label(self) -> str:
        """`_member1_generation2` and so on, for file names; "" without a filter."""
        return "".join(f"_{name}{getattr(self, name)}" for name in ("member", "generation", "opponent")
                       if getattr(self, name) is not None)

    @property
    def description(self) -> str:
        chosen = [f"{name} {getattr(self, name)}" for name in ("member", "generation", "opponent")
                  if getattr(self, name) is not None]
        return ", ".join(chosen)


@dataclass(frozen=True)
class RecordedPolicy:
    """One run's recorded episodes of one policy, read once for all its figures: the episode index
    and the action and policy version of every step (no observations)."""

    run: RunData
    policy: str
    index: pd.DataFrame  # one row per whole episode: the columns of RunReader.episodes
    actions: np.ndarray  # [steps, action dimensions] (one dimension for a discrete action)
    versions: np.ndarray  # [steps] the policy version that chose each action
    tags: EpisodeTags = EpisodeTags()

    @property
    def discrete(self) -> bool:
        return np.issubdtype(self.actions.dtype, np.integer)

    @property
    def label(self) -> str:
        """`<run>_<policy>` (and the tags filtered on), safe in a file name."""
        return re.sub(r"[^\w.-]", "_", f"{self.run.name}_{self.policy}{self.tags.label}")

    @property
    def title(self) -> str:
        chosen = self.tags.description
        return f"{self.run.name}, policy {self.policy}" + (f" ({chosen})" if chosen else "")


def read_recorded(run: RunData, policy: str, tags: EpisodeTags = EpisodeTags()) -> RecordedPolicy:
    """The index of `policy`'s whole episodes in `run` (those with `tags`), and their steps'
    actions and versions."""
    try:
        with open_run(run.path) as reader:
            index = reader.episodes(policy)
            keep = tags.mask(index)
            index = {name: values[keep] for name, values in index.items()}
            columns = reader.step_columns(("actions", "policy_version"), policy, index)
        actions, versions = columns["actions"], columns["policy_version"]
    except (OSError, KeyError, ValueError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise RunFileError(f"error: {run.path} has unreadable trajectories of {policy!r}: {reason}") from None
    return RecordedPolicy(run, policy, pd.DataFrame(index), actions.reshape(len(versions), -1), versions, tags)


def version_buckets(versions: np.ndarray, buckets: int = VERSION_BUCKETS) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Each step's bucket, and each bucket's (first, last) version: one bucket per version when at
    most `buckets` acted, else `buckets` equal ranges of version numbers (empty ones left out)."""
    distinct = np.unique(versions)
    if len(distinct) <= buckets:
        return np.searchsorted(distinct, versions), [(int(v), int(v)) for v in distinct]
    low, high = int(distinct[0]), int(distinct[-1])
    edges = low + (high - low + 1) * np.arange(1, buckets) / buckets
    raw = np.searchsorted(edges, versions, side="right")
    used = np.unique(raw)
    ranges = [(int(versions[raw == k].min()), int(versions[raw == k].max())) for k in used]
    return np.searchsorted(used, raw), ranges


def _versions_label(first: int, last: int) -> str:
    return f"v{first}" if first == last else f"v{first}-{last}"


def choose_episodes(numbers: Sequence[int], wanted: Sequence[int] | None = None) -> list[int]:
    """Rows of the index (`numbers`: its episode numbers) of the episodes `wanted` that are recorded
    (every member's, in a population run), or else of the first, middle and last recorded."""
    numbers = [int(number) for number in numbers]
    if wanted is not None:
        order = {number: k for k, number in enumerate(dict.fromkeys(wanted))}
        rows = [row for row, number in enumerate(numbers) if number in order]
        return sorted(rows, key=lambda row: order[numbers[row]])
    if not numbers:
        return []
    return list(dict.fromkeys([0, len(numbers) // 2, len(numbers) - 1]))


def _bins(values: np.ndarray) -> int:
    """A bin per distinct value, up to MAX_BINS (a handful of CartPole lengths, or many returns)."""
    return int(min(MAX_BINS, len(np.unique(values))))


def plot_episode_distributions(recorded: RecordedPolicy, out_path: Path) -> FigureResult:
    """Histograms of the episodes' returns (as the learner counted them) and lengths; the rows are
    the episode index."""
    data = recorded.index.copy()
    data.insert(0, "policy", recorded.policy)
    data.insert(0, "run", recorded.run.name)
    figure, (returns, lengths) = new_figure(columns=2, width=5.0)
    for axis, column, label in ((returns, "return", "episode return"), (lengths, "length", "episode length (steps)")):
        values = data[column].to_numpy(dtype=float)
        axis.hist(values, bins=_bins(values), color="tab:blue", alpha=0.8)
        axis.axvline(values.mean(), color="black", linestyle="--", label=f"mean {values.mean():.4g}")
        axis.set_xlabel(label)
        axis.set_ylabel("episodes")
        axis.grid(alpha=0.3)
        axis.legend(fontsize="small")
    title = f"{recorded.title}: {len(data)} recorded episodes"
    return save(figure, out_path, title, data)


def action_data(recorded: RecordedPolicy) -> pd.DataFrame:
    """Per range of policy versions: discrete actions' counts (steps) and shares per action and
    dimension; continuous actions' steps, mean and standard deviation per dimension."""
    bucket, ranges = version_buckets(recorded.versions)
    low = min(0, int(recorded.actions.min()))
    actions = int(recorded.actions.max()) - low + 1
    rows = []
    for k, (first, last) in enumerate(ranges):
        chosen = recorded.actions[bucket == k]
        common = {"run": recorded.run.name, "policy": recorded.policy, "versions": _versions_label(first, last),
                  "version_first": first, "version_last": last}
        for dimension in range(chosen.shape[1]):
            values = chosen[:, dimension]
            if recorded.discrete:
                counts = np.bincount(values - low, minlength=actions)
                rows += [{**common, "dimension": dimension, "action": low + action, "steps": int(count),
                          "share": count / len(values)} for action, count in enumerate(counts)]
            else:
                rows.append({**common, "dimension": dimension, "steps": len(values), "mean": float(values.mean()),
                             "std": float(values.std())})
    return pd.DataFrame(rows)


def plot_actions(recorded: RecordedPolicy, out_path: Path) -> FigureResult:
    """Discrete actions: each action's share of the steps, a bar per range of policy versions (a
    panel per dimension); continuous: each dimension's mean +- std per range."""
    data = action_data(recorded)
    ranges = list(dict.fromkeys(data["versions"]))
    width = 0.8 / len(ranges)
    dimensions = int(data["dimension"].max()) + 1 if recorded.discrete else 1
    groups = data["action"].nunique() if recorded.discrete else data["dimension"].nunique()
    figure, axes = new_figure(columns=dimensions, width=max(5.0, min(16.0, 0.4 * len(ranges) * groups)))
    for dimension, axis in enumerate(axes):
        rows = data[data["dimension"] == dimension] if recorded.discrete else data
        x_column = "action" if recorded.discrete else "dimension"
        for k, versions in enumerate(ranges):
            part = rows[rows["versions"] == versions]
            x = part[x_column].to_numpy() + (k - (len(ranges) - 1) / 2) * width
            if recorded.discrete:
                axis.bar(x, 100.0 * part["share"], width=width, label=versions)
            else:
                axis.errorbar(x, part["mean"], yerr=part["std"], fmt="o", capsize=3, label=versions)
        ticks = sorted(rows[x_column].unique())
        axis.set_xticks(ticks, [str(tick) for tick in ticks])
        axis.set_xlabel(f"action (dimension {dimension})" if recorded.discrete and dimensions > 1
                        else "action" if recorded.discrete else "action dimension")
        axis.set_ylabel("steps (%)" if recorded.discrete else "action: mean +- std")
        axis.grid(alpha=0.3, axis="y")
        axis.legend(title="policy versions", fontsize="small")
    title = f"{recorded.title}: actions by policy version"
    return save(figure, out_path, title, data)


def _episode_name(index: pd.DataFrame, row: int) -> str:
    member = int(index["member"].iloc[row])
    return f"episode {int(index['episode'].iloc[row])}" + (f" (member {member})" if member >= 0 else "")


def reward_data(recorded: RecordedPolicy, rows: Sequence[int]) -> pd.DataFrame:
    """Rows (run, policy, member, generation, opponent, episode, step, reward, return_so_far,
    policy_version) of the episodes in `rows` of the index."""
    frames = []
    index = recorded.index
    columns = {name: index[name].to_numpy() for name in index.columns}
    with open_run(recorded.run.path) as reader:
        for row in rows:
            steps = reader.episode_at(row, recorded.policy, columns)
            frames.append(pd.DataFrame({
                "run": recorded.run.name, "policy": recorded.policy, "member": int(index["member"].iloc[row]),
                "generation": int(index["generation"].iloc[row]), "opponent": str(index["opponent"].iloc[row]),
                "episode": int(index["episode"].iloc[row]), "label": _episode_name(index, row), "step": steps["step"],
                "reward": steps["rewards"].astype(float), "return_so_far": np.cumsum(steps["rewards"], dtype=float),
                "policy_version": steps["policy_version"]}))
    return pd.concat(frames, ignore_index=True)


def plot_rewards(recorded: RecordedPolicy, out_path: Path, rows: Sequence[int]) -> FigureResult:
    """The reward of every step of the episodes in `rows` of the index, and the return so far, one
    line per episode."""
    data = reward_data(recorded, rows)
    figure, (rewards, returns) = new_figure(rows=2, width=8.0, height=3.0)
    for label, part in data.groupby("label", sort=False):
        line, = rewards.plot(part["step"], part["reward"], linewidth=0.8, marker="." if len(part) <= 300 else None,
                             markersize=3, label=label)
        returns.plot(part["step"], part["return_so_far"], color=line.get_color(), label=label)
    rewards.set_ylabel("reward")
    returns.set_ylabel("return so far")
    returns.set_xlabel("step")
    for axis in (rewards, returns):
        axis.grid(alpha=0.3)
        axis.legend(fontsize="small")
    names = ", ".join(dict.fromkeys(data["label"]))
    title = f"{recorded.title}: rewards of {names}"
    return save(figure, out_path, title, data)


def trajectory_table(recorded: Sequence[RecordedPolicy]) -> pd.DataFrame:
    """One row per run, policy, member and opponent (one per run and policy for a `train` run):
    episodes and steps recorded, their returns and mean length, the generations they were played
    in, and the policy versions that chose the recorded actions (first, last, how many distinct)."""
    rows = []
    for item in recorded:
        index = item.index
        owner = np.repeat(np.arange(len(index)), index["length"].to_numpy())  # each step's episode row
        for (member, opponent), part in index.groupby(["member", "opponent"], sort=True):
            versions = item.versions[np.isin(owner, np.flatnonzero((index["member"] == member).to_numpy()
                                                                   & (index["opponent"] == opponent).to_numpy()))]
            rows.append({"run": item.run.name, "policy": item.policy, "member": int(member), "opponent": opponent,
                         "generation_first": int(part["generation"].min()),
                         "generation_last": int(part["generation"].max()), "episodes": len(part),
                         "steps": int(part["length"].sum()), "return_mean": float(part["return"].mean()),
                         "return_min": float(part["return"].min()), "return_max": float(part["return"].max()),
                         "length_mean": float(part["length"].mean()), "version_first": int(versions.min()),
                         "version_last": int(versions.max()), "versions": len(np.unique(versions))})
    return pd.DataFrame(rows, columns=TABLE_COLUMNS)


def _check_episodes(recorded: Sequence[RecordedPolicy], episodes: Sequence[int]) -> None:
    """Every episode asked for must be recorded somewhere; else one line naming what is."""
    known = {int(number) for item in recorded for number in item.index["episode"]}
    missing = [number for number in episodes if number not in known]
    if missing:
        shown = sorted(known)
        listing = ", ".join(map(str, shown[:10])) + (", ..." if len(shown) > 10 else "")
        raise MissingDataError(f"error: episode {missing[0]} is not recorded in the runs given "
                               f"(they record {len(shown)} episodes: {listing})")


def trajectory_analysis(runs: Sequence[RunData], out_dir: Path, policy: str | None = None,
                        episodes: Sequence[int] | None = None, tags: EpisodeTags = EpisodeTags()) -> Analysis:
    """Per run and policy with recorded episodes (only `policy` when given; only the episodes with
    `tags`): `episodes_<run>_<policy>.png` (returns and lengths), `actions_<run>_<policy>.png` and
    `rewards_<run>_<policy>.png` (the steps of `episodes`, by default the first, middle and last
    recorded; every member's episode of a number, in a population run). The file names end with
    the tags filtered on. Runs and policies without such episodes are left out; the table has one
    row per run, policy, member and opponent."""
    recorded = [read_recorded(run, name, tags) for run in runs for name, count in run.trajectories.items()
                if count > 0 and (policy is None or name == policy)]
    if tags.description:
        recorded = [item for item in recorded if len(item.index)]
    if tags.description and not recorded:
        raise MissingDataError(f"error: no recorded episodes of {tags.description} in the runs given")
    if episodes is not None:
        _check_episodes(recorded, episodes)
    figures = []
    out_dir = Path(out_dir)
    for item in recorded:
        figures.append(plot_episode_distributions(item, out_dir / f"episodes_{item.label}.png"))
        figures.append(plot_actions(item, out_dir / f"actions_{item.label}.png"))
        chosen = choose_episodes(item.index["episode"], episodes)
        if chosen:
            figures.append(plot_rewards(item, out_dir / f"rewards_{item.label}.png", chosen))
    return Analysis(figures, trajectory_table(recorded))
