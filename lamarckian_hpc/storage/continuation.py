"""Continue a run file after a crash, a kill or a requeue, without duplicated or missing rows.

A file whose writer was killed still carries HDF5's "open for SWMR write" flag, and HDF5 refuses
to open it for writing again (only the ``h5clear`` tool clears the flag). So a run is continued
by rewriting: the rows up to the last checkpoint's policy version are copied into a fresh file,
which then atomically replaces the old one. Rows written after the checkpoint belong to updates
the resumed run will redo, so they are dropped rather than duplicated. The copy costs one pass
over the metrics, which are small next to the hours of training they describe.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .private_files import fsync_folder
from .reader import RunReader, open_run
from .run_file import RunWriter
from .trajectories import EpisodeRecord, TrajectorySpec


def _kept_episodes(old: RunReader, specs: Iterable[TrajectorySpec], through_env_frames: int | None,
                   through_generation: int):
    """The old file's recorded episodes of the policies the new file records, up to the checkpoint
    (a population run's: of its generations up to `through_generation`)."""
    recorded = set(old.trajectory_policies())
    for spec in specs:
        if spec.policy_id not in recorded:
            continue
        index = old.episodes(spec.policy_id)
        for row in range(len(index["episode"])):
            if through_env_frames is not None and index["env_frames"][row] > through_env_frames:
                continue
            if index["generation"][row] > through_generation:
                continue
            steps = old.episode_at(row, spec.policy_id, index)
            yield EpisodeRecord(spec.policy_id, str(steps["agent_id"][0]), steps["observations"], steps["actions"],
                                steps["rewards"], steps["policy_version"], bool(steps["terminated"][-1]),
                                int(index["episode"][row]), float(index["return"][row]), int(index["actor"][row]),
                                str(index["host"][row]), int(index["env_frames"][row]), float(index["wall_time"][row]),
                                int(index["member"][row]), int(index["generation"][row]), str(index["opponent"][row]))


def continue_run_file(path: str | Path, metric_names: Iterable[str], through_version: int,
                      meta: Mapping[str, Any] | None = None, *, through_env_frames: int | None = None,
                      writer_class: type[RunWriter] = RunWriter, **writer_options: Any) -> RunWriter:
    """A writer on `path` that holds every metric row with policy_version <= `through_version`,
    every population row with generation <= `through_version` (an evolution run's metrics carry the
    generation as their version) and, when the writer records trajectories (`writer_options`), every
    recorded episode written at or before `through_env_frames`.

    `writer_class` (a RunWriter, or one that lays out more groups) writes the new file with
    `writer_options`. `meta` entries are added to the file's `/meta`; `resumes` counts how often the run was
    continued. The old file stays untouched until the new one is complete, so a crash during the
    copy loses nothing.
    """
    path = Path(path)
    with open_run(path) as old:
        old_meta = dict(old.meta)
        old_series = old.metrics()
        config = old.config
        population = old.population()
        genome_names = old.genome_names()
        episodes = list(_kept_episodes(old, writer_options.get("trajectories", ()), through_env_frames,
                                       through_version))
    names = list(dict.fromkeys([*old_series, *metric_names]))
    old_meta.update(meta or {})
    old_meta["resumes"] = int(old_meta.get("resumes", 0)) + 1
    old_meta["resumed_through_version"] = int(through_version)
    if population:
        shape = (population["genome"].shape[1], population["objectives"].shape[1])
        writer_options["population_shape"] = (*shape, genome_names) if genome_names else shape
    temporary = path.with_name(path.name + ".continuing")
    temporary.unlink(missing_ok=True)
    writer = writer_class(temporary, config, names, meta=old_meta, **writer_options)
    try:
        for name, series in old_series.items():
            keep = np.flatnonzero(series.policy_version <= through_version)
            writer.append_series(name, series.wall_time[keep], series.env_frames[keep], series.policy_version[keep],
                                 series.value[keep])
        if population:
            keep = population["generation"] <= through_version
            writer.append_population({column: values[keep] for column, values in population.items()})
        for record in episodes:
            writer.append_episode(record)
        writer.flush()
    except BaseException:
        writer.close(completed=False)
        temporary.unlink(missing_ok=True)
        raise
    try:
        os.replace(temporary, path)  # the open handle follows the file to its new name
        fsync_folder(path.parent)
    except BaseException:
        writer.close(completed=False)
        temporary.unlink(missing_ok=True)
        raise
    writer.path = path
    return writer
