"""Population histories in the run file: one row per evaluated individual, every generation.

SWMR forbids creating groups once writing has started, so the history is not one group per
generation: it is a set of column datasets under `/population`, all growing together, with a
`generation` column to select by. Readers see whole generations: columns are cut to the shortest.
"""

from __future__ import annotations

import h5py
import numpy as np

POPULATION_GROUP = "population"
CHUNK_ROWS = 256


def create_population_datasets(file: h5py.File, genome_length: int, num_objectives: int) -> dict[str, h5py.Dataset]:
    group = file.create_group(POPULATION_GROUP)
    shapes: dict[str, tuple[tuple[int, ...], str]] = {
        "generation": ((), "int64"),
        "id": ((), "int64"),
        "parent_ids": ((2,), "int64"),
        "genome": ((genome_length,), "float64"),
        "objectives": ((num_objectives,), "float64"),
        "wall_time": ((), "float64"),
        "worker": ((), "int64"),
    }
    return {
        name: group.create_dataset(name, shape=(0, *inner), maxshape=(None, *inner), chunks=(CHUNK_ROWS, *inner),
                                   dtype=dtype)
        for name, (inner, dtype) in shapes.items()
    }


def append_population_rows(datasets: dict[str, h5py.Dataset], rows: dict[str, np.ndarray]) -> None:
    missing = set(datasets) - set(rows)
    if missing:
        raise ValueError(f"population rows lack columns {sorted(missing)}")
    count = len(rows["id"])
    for name, dataset in datasets.items():
        column = np.asarray(rows[name], dtype=dataset.dtype)
        if column.shape != (count, *dataset.shape[1:]):
            raise ValueError(f"population column {name!r} has shape {column.shape}, expected {(count, *dataset.shape[1:])}")
        old = dataset.shape[0]
        dataset.resize((old + count, *dataset.shape[1:]))
        dataset[old:] = column


def read_population(file: h5py.File) -> dict[str, np.ndarray]:
    """All rows written so far (empty dict when the run has no population)."""
    if POPULATION_GROUP not in file:
        return {}
    group = file[POPULATION_GROUP]
    for dataset in group.values():
        dataset.refresh()
    length = min(dataset.shape[0] for dataset in group.values())
    return {name: dataset[:length] for name, dataset in group.items()}
