"""Damaged run files: truncated, overwritten in places, not HDF5, HDF5 but not a run file. Reading
one ends in its data or in one RunFileReadError that names the file, never in another exception."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
from fuzz_budget import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lamarckian_hpc.storage import RunFileReadError, RunWriter, open_run
from lamarckian_hpc.storage import reader as reader_module


def _write_run(path: Path) -> Path:
    with RunWriter(path, {"seed": 3, "env": {"id": "CartPole-v1"}}, ["entropy", "loss_value"],
                   meta={"hosts": ["a", "b"], "extra": {"k": [1, None]}},
                   population_shape=(2, 2, ("lr", "vw"))) as writer:
        for row in range(40):
            writer.append_many({"entropy": 0.1 * row, "loss_value": -row}, env_frames=10 * row, policy_version=row)
        writer.append_population({"generation": np.zeros(3, np.int64), "id": np.arange(3),
                                  "parent_ids": np.full((3, 2), -1), "genome": np.ones((3, 2)),
                                  "objectives": np.zeros((3, 2)), "wall_time": np.zeros(3),
                                  "worker": np.zeros(3, np.int64)})
    return path


@pytest.fixture
def quick_retries(monkeypatch):
    """Damaged metadata fails after a few microseconds of retries instead of about a second each:
    the generated cases meet hundreds of them."""
    monkeypatch.setattr(reader_module, "METADATA_READ_ATTEMPTS", 8)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> bytes:
    return _write_run(tmp_path_factory.mktemp("pristine") / "run.h5").read_bytes()


def _global_heaps(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of each global heap collection: where HDF5 keeps variable-length strings (the
    config JSON, meta strings). HDF5 keeps no checksum of them, and its parser of a collection
    loops for ever over an object of size 0 (HDF5 2.0.0): no reader in this process can guard
    against that damage, so the generated damage leaves them alone."""
    heaps, start = [], data.find(b"GCOL")
    while start >= 0:
        heaps.append((start, start + int.from_bytes(data[start + 8:start + 16], "little")))
        start = data.find(b"GCOL", start + 1)
    return heaps


def _read_everything(path: Path) -> None:
    """Every read a caller makes: `inspect`, the report, a resume."""
    with open_run(path) as reader:
        reader.summary()
        reader.population()
        reader.genome_columns()
        assert isinstance(reader.config, dict) and isinstance(reader.meta, dict)


def _reads_or_one_error(path: Path) -> None:
    try:
        _read_everything(path)
    except RunFileReadError as error:
        message = str(error)
        assert str(path) in message and "\n" not in message and len(message) < 600, message


# ---------------------------------------------------------------------------------------------- examples
@pytest.mark.parametrize("length", [0, 8, 48, 512, 2048, 20_000])
def test_a_truncated_run_file_is_one_clear_error_within_seconds(tmp_path: Path, pristine: bytes, length: int) -> None:
    """HDF5 retries a metadata read whose checksum fails (a SWMR reader may catch the writer
    mid-flush); unbounded, the retries keep a reader of a damaged file waiting for an hour."""
    path = tmp_path / "cut.h5"
    path.write_bytes(pristine[:length])
    started = time.monotonic()
    with pytest.raises(RunFileReadError, match="cut.h5"):
        _read_everything(path)
    assert time.monotonic() - started < 10


def test_a_file_that_is_not_hdf5_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "notes.h5"
    path.write_text("seed: 1\n")
    with pytest.raises(RunFileReadError, match="not a readable HDF5 file"):
        open_run(path)


def test_an_hdf5_file_that_is_not_a_run_file_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "other.h5"
    with h5py.File(path, "w", libver="latest") as file:
        file.create_dataset("x", data=np.arange(3))
    with pytest.raises(RunFileReadError, match="not a run file: it has no /meta"):
        open_run(path)


def test_a_damaged_config_attribute_is_one_clear_error(tmp_path: Path) -> None:
    path = _write_run(tmp_path / "run.h5")
    with h5py.File(path, "r+", libver="latest") as file:
        file["config"].attrs["json"] = "[" * 100_000 + "]" * 100_000
    with pytest.raises(RunFileReadError, match="run.h5"):
        open_run(path)
    with h5py.File(path, "r+", libver="latest") as file:
        file["config"].attrs["json"] = "{not json"
    with pytest.raises(RunFileReadError, match="run.h5"):
        open_run(path)


def test_a_shape_that_claims_more_than_the_file_holds_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "run.h5"
    with h5py.File(path, "w", libver="latest") as file:  # a run file's layout, with one absurd column
        file.create_group("meta")
        file.create_group("config").attrs["json"] = "{}"
        file.create_dataset("status/closed", data=np.zeros(1, np.int8))
        for column in ("wall_time", "env_frames", "policy_version", "value"):
            file.create_dataset(f"metrics/entropy/{column}", shape=(10**11,), maxshape=(None,), chunks=(1024,),
                                dtype=np.float64)
    with open_run(path) as reader:
        with pytest.raises(RunFileReadError, match="claims"):
            reader.metric("entropy")
        with pytest.raises(KeyError, match="no metric"):  # asking for a metric it lacks is no damage
            reader.metric("nope")


def test_a_missing_file_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such run file"):
        open_run(tmp_path / "absent.h5")


def test_a_pristine_file_reads_back(tmp_path: Path, pristine: bytes) -> None:
    path = tmp_path / "run.h5"
    path.write_bytes(pristine)
    with open_run(path) as reader:
        assert reader.config["seed"] == 3 and len(reader.metric("entropy")) == 40
        assert reader.genome_names() == ["lr", "vw"] and len(reader.population()["id"]) == 3


# ---------------------------------------------------------------------------------------------- generated damage
@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.data())
def test_truncated_run_files_read_or_fail_with_one_error(tmp_path_factory, pristine, quick_retries, data) -> None:
    length = data.draw(st.integers(0, len(pristine) - 1), label="length")
    path = tmp_path_factory.mktemp("cut") / "run.h5"
    path.write_bytes(pristine[:length])
    _reads_or_one_error(path)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.data())
def test_overwritten_run_files_read_or_fail_with_one_error(tmp_path_factory, pristine, quick_retries,
                                                          data) -> None:
    """A few bytes overwritten anywhere, mostly among the first pages, where the superblock, the
    object headers, the B-trees and the attributes sit (the rest is mostly row data), except in
    HDF5's global heap (see `_global_heaps`)."""
    damaged = bytearray(pristine)
    heaps = _global_heaps(pristine)
    for _ in range(data.draw(st.integers(1, 8), label="writes")):
        offset = data.draw(st.one_of(st.integers(0, 4096), st.integers(0, len(damaged) - 1)), label="offset")
        chunk = data.draw(st.binary(min_size=1, max_size=8), label="bytes")
        if not any(offset < end and offset + len(chunk) > start for start, end in heaps):
            damaged[offset:offset + len(chunk)] = chunk
    path = tmp_path_factory.mktemp("damaged") / "run.h5"
    path.write_bytes(bytes(damaged[:len(pristine)]))
    _reads_or_one_error(path)


def test_the_generated_cases_start_from_a_readable_file(tmp_path: Path, pristine: bytes) -> None:
    path = tmp_path / "run.h5"
    path.write_bytes(pristine)
    _read_everything(path)
    shutil.copy(path, tmp_path / "copy.h5")
    with open_run(tmp_path / "copy.h5") as reader:
        assert json.loads(json.dumps(reader.summary().to_json_dict()))["counts"]["entropy"] == 40
