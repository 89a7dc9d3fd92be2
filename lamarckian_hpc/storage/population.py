"""Population histories in the run file: one row per evaluated individual, every generation.

SWMR forbids creating groups once writing has started, so the history is not one group per
generation: it is a set of column datasets under `/population`, all growing together, with a
`generation` column to select by. Readers see whole generations: columns are cut to the shortest.

The genome's entries may be named (a PBT run's genome is its hyperparameters): the names are the
group's `genome_names` attribute, written at creation like everything SWMR must not create later.
`env_frames` holds what a learner had trained on when it was evaluated (0 for numeric problems);
`host` the name of the host whose process (`worker`, its pid) evaluated or trained it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import h5py
import numpy as np

POPULATION_GROUP = "population"
CHUNK_ROWS = 256
GENOME_NAMES_ATTRIBUTE = "genome_names"
#: Columns a writer may leave out, and what fills them: numeric problems have no env frames, and
#: files written before the host column existed continue without one.
OPTIONAL_COLUMNS: dict[str, object] = {"env_frames": 0, "host": ""}


def create_population_datasets(file: h5py.File, genome_length: int, num_objectives: int,
                               genome_names: Sequence[str] = ()) -> dict[str, h5py.Dataset]:
    """The columns under `/population`; a RunWriter's `population_shape` is (genome_length,
    num_objectives) or (genome_length, num_objectives, genome_names)."""
    if genome_names and len(genome_names) != genome_length:
        raise ValueError(f"{len(genome_names)} genome names for a genome of length {genome_length}")
    group = file.create_group(POPULATION_GROUP)
    if genome_names:
        group.attrs[GENOME_NAMES_ATTRIBUTE] = np.array(list(genome_names), dtype=h5py.string_dtype())
    shapes: dict[str, tuple[tuple[int, ...], str]] = {
        "generation": ((), "int64"),
        "id": ((), "int64"),
        "parent_ids": ((2,), "int64"),
        "genome": ((genome_length,), "float64"),
        "objectives": ((num_objectives,), "float64"),
        "wall_time": ((), "float64"),
        "worker": ((), "int64"),
        "env_frames": ((), "int64"),
        "host": ((), h5py.string_dtype()),
    }
    return {
        name: group.create_dataset(name, shape=(0, *inner), maxshape=(None, *inner), chunks=(CHUNK_ROWS, *inner),
                                   dtype=dtype)
        for name, (inner, dtype) in shapes.items()
    }


def append_population_rows(datasets: dict[str, h5py.Dataset], rows: dict[str, np.ndarray]) -> None:
    count = len(rows["id"])
    rows = {**{name: np.full(count, fill, dtype=object if isinstance(fill, str) else np.int64)
               for name, fill in OPTIONAL_COLUMNS.items() if name in datasets}, **rows}
    missing = set(datasets) - set(rows)
    if missing:
        raise ValueError(f"population rows lack columns {sorted(missing)}")
    for name, dataset in datasets.items():
        column = np.asarray(rows[name], dtype=dataset.dtype)
        if column.shape != (count, *dataset.shape[1:]):
            raise ValueError(f"population column {name!r} has shape {column.shape}, expected {(count, *dataset.shape[1:])}")
        old = dataset.shape[0]
        dataset.resize((old + count, *dataset.shape[1:]))
        dataset[old:] = column


def read_population(file: h5py.File,
                    check: Callable[[h5py.Dataset, int], None] | None = None) -> dict[str, np.ndarray]:
    """All rows written so far (empty dict when the run has no population). `check(dataset, rows)`
    sees each column before it is read, and may refuse it (a damaged shape, say)."""
    if POPULATION_GROUP not in file:
        return {}
    group = file[POPULATION_GROUP]
    for dataset in group.values():
        dataset.refresh()
    length = min(dataset.shape[0] for dataset in group.values())
    for dataset in group.values():
        if check is not None:
            check(dataset, length)
    return {name: (dataset.asstr() if h5py.check_string_dtype(dataset.dtype) else dataset)[:length]
            for name, dataset in group.items()}


def read_genome_names(file: h5py.File) -> list[str]:
    """Names of the genome's entries ([] when the run did not name them)."""
    if POPULATION_GROUP not in file or GENOME_NAMES_ATTRIBUTE not in file[POPULATION_GROUP].attrs:
        return []
    return [name.decode() if isinstance(name, bytes) else str(name)
            for name in file[POPULATION_GROUP].attrs[GENOME_NAMES_ATTRIBUTE]]
