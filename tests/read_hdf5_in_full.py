"""Read every dataset and every attribute of HDF5 files in full, and print what was read as JSON.

Run by tests/test_run_file_readers.py in a virtual environment of its own, with an h5py built on an
older HDF5 (CI's step 3 installs one): so it imports h5py and numpy alone, nothing of this package,
and runs on any h5py from 3.0 on. Files are opened in SWMR read mode, as the run-file reference tells
readers to, so it also reads a run file while its writer has it open.

    python read_hdf5_in_full.py RUN.h5 [...]
    -> {"hdf5_version": "1.12.2", "files": {"RUN.h5": {"groups": 9, "datasets": 40, "attributes": 15,
        "elements": 12345}}}
"""

import json
import sys

import h5py
import numpy as np


def read_in_full(path: str) -> dict:
    counts = {"groups": 1, "datasets": 0, "attributes": 0, "elements": 0}

    def read_attributes(item) -> None:
        for name in item.attrs:
            value = item.attrs[name]
            counts["attributes"] += 1
            counts["elements"] += int(np.size(value))

    def visit(name: str, item) -> None:
        if isinstance(item, h5py.Dataset):
            data = item[()]
            counts["datasets"] += 1
            counts["elements"] += int(np.size(data))
        else:
            counts["groups"] += 1
        read_attributes(item)

    with h5py.File(path, "r", swmr=True) as file:
        read_attributes(file)
        file.visititems(visit)
    return counts


if __name__ == "__main__":
    print(json.dumps({"hdf5_version": h5py.version.hdf5_version,
                      "files": {path: read_in_full(path) for path in sys.argv[1:]}}))
