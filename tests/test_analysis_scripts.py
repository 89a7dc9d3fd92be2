"""The scripts in analysis/ and `lamarckian-hpc export`, run as a user runs them on run files made
by the real commands (analysis_runs.py): each script is a subprocess that writes its PNGs and
CSVs and prints its table; the CSVs hold what the run-file reader returns; a missing file, a file
that is not a run file, and a run without the script's data each end in one line and status 2.
The export is read back from the TensorBoard event file and compared with the metric rows."""

from __future__ import annotations

import struct
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pytest
from analysis_runs import (  # noqa: F401 (fixtures)
    STALENESS_BINS,
    WRITTEN_RUNS,
    emogi_path,
    league_path,
    nsga2_path,
    pbt_path,
    ppo_path,
    runs_dir,
    written_paths,
)

from lamarckian_hpc.analysis.export import start_seconds
from lamarckian_hpc.cli import main
from lamarckian_hpc.ec import hypervolume, non_dominated_fronts
from lamarckian_hpc.storage import RunWriter, open_run

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ("learning_curves", "staleness", "scaling", "pareto", "lineage", "league", "trajectories")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def run_script(name: str, *arguments: object, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "analysis" / f"{name}.py"), *map(str, arguments)],
                          capture_output=True, text=True, cwd=cwd, timeout=180)


def succeeded(done: subprocess.CompletedProcess, out: Path, pngs: set[str]) -> None:
    """Exit 0, a Markdown table on stdout, and each PNG with its CSV in `out`."""
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("| ") and "|---" in done.stdout, done.stdout
    for name in pngs:
        assert (out / name).read_bytes().startswith(PNG_SIGNATURE), name
        assert (out / name).with_suffix(".csv").is_file(), name


def test_every_script_is_tested() -> None:
    assert {path.stem for path in (ROOT / "analysis").glob("*.py")} == set(SCRIPTS)


def test_learning_curves_of_every_workload_from_another_folder(ppo_path: Path, nsga2_path: Path, pbt_path: Path,
                                                               emogi_path: Path, league_path: Path,
                                                               tmp_path: Path) -> None:
    paths = [ppo_path, nsga2_path, pbt_path, emogi_path, league_path]
    done = run_script("learning_curves", *paths, "--out", "figures", cwd=tmp_path)  # relative to where it runs
    out = tmp_path / "figures"
    metrics = {"episode_return_mean", "hypervolume", "best_return", "best_normalized_score", "main_exploitability"}
    succeeded(done, out, {f"curve_{metric}_{axis}.png" for metric in metrics for axis in ("frames", "wall_time")})
    assert [f"[{k}/5] reading" in done.stderr for k in range(1, 6)] == [True] * 5
    curve = pd.read_csv(out / "curve_episode_return_mean_frames.csv")
    table = pd.read_csv(out / "learning_curves.csv").set_index("run")
    with open_run(ppo_path) as reader:
        expected = reader.metric("episode_return_mean")
    np.testing.assert_array_equal(curve["env_frames"], expected.env_frames)
    np.testing.assert_array_equal(curve["value"], expected.value)
    assert table.loc["ppo_serial", "final"] == expected.value[-1] and table.loc["ppo_serial", "rows"] == len(expected)
    assert table.loc["pbt_tiny", "metric"] == "best_return"
    for name in ("ppo_serial", "nsga2_zdt1", "pbt_tiny", "emogi_pong", "league_rps"):
        assert f"| {name} |" in done.stdout


def test_staleness_histogram_and_against_hosts(ppo_path: Path, written_paths: dict[str, Path], tmp_path: Path) -> None:
    done = run_script("staleness", ppo_path, *written_paths.values(), "--out", tmp_path)
    succeeded(done, tmp_path, {"staleness_histogram.png", "staleness_vs_hosts.png"})
    histogram = pd.read_csv(tmp_path / "staleness_histogram.csv", dtype={"staleness": str})
    table = pd.read_csv(tmp_path / "staleness.csv").set_index("run")
    for path in (ppo_path, *written_paths.values()):
        with open_run(path) as reader:
            counts = [reader.metric(name).value.sum() for name in STALENESS_BINS]
            means = reader.metric("staleness_mean").value
            largest = reader.metric("staleness_max").value.max()
        rows = histogram[histogram["run"] == path.stem]
        assert list(rows["staleness"]) == [str(k) for k in range(8)] + ["8+"]
        np.testing.assert_array_equal(rows["steps"], counts)
        assert table.loc[path.stem, "staleness_mean"] == pytest.approx(means[1:].mean())
        assert table.loc[path.stem, "staleness_max"] == largest
        assert table.loc[path.stem, "fresh_share"] == pytest.approx(counts[0] / sum(counts))
    for name, _, broadcast, _, hosts in WRITTEN_RUNS:  # hosts from /meta, or the simulated nodes
        assert table.loc[name, "hosts"] == hosts and table.loc[name, "broadcast"] == broadcast
    assert table.loc["ppo_serial", "hosts"] == 1 and table.loc["ppo_serial", "broadcast"] == "serial"


def test_scaling_against_cores_from_several_runs(ppo_path: Path, written_paths: dict[str, Path],
                                                 tmp_path: Path) -> None:
    sampling = ROOT / "benchmarks" / "results" / "sampling.json"
    done = run_script("scaling", ppo_path, *written_paths.values(), "--sampling", sampling, "--out", tmp_path)
    succeeded(done, tmp_path, {"throughput_vs_cores.png", "staleness_vs_cores.png"})
    table = pd.read_csv(tmp_path / "scaling.csv")
    runs = table[table["source"].str.endswith(".h5")].set_index("source")
    assert (~table["source"].str.endswith(".h5")).any()  # the benchmark's points beside the runs'
    expected_cores = {str(ppo_path): 1, **{str(written_paths[name]): actors for name, actors, *_ in WRITTEN_RUNS}}
    assert runs["cores"].to_dict() == expected_cores
    for path in expected_cores:
        with open_run(path) as reader:
            sampled = reader.metric("env_frames_per_second").value
            trained = reader.metric("trained_frames_per_second").value
        assert runs.loc[path, "steps_per_second"] == pytest.approx(sampled[1:].mean())  # start-up row left out
        assert runs.loc[path, "trained_per_second"] == pytest.approx(trained[1:].mean())


def test_pareto_fronts_per_generation_and_hypervolume(nsga2_path: Path, emogi_path: Path, tmp_path: Path) -> None:
    done = run_script("pareto", nsga2_path, "--reference", 1.1, 1.1, "--out", tmp_path / "zdt1")
    succeeded(done, tmp_path / "zdt1", {"pareto_fronts.png", "pareto_by_generation_nsga2_zdt1.png",
                                        "hypervolume.png"})
    volumes = pd.read_csv(tmp_path / "zdt1" / "hypervolume.csv")
    with open_run(nsga2_path) as reader:
        population = reader.population()
        recorded = reader.metric("hypervolume")
    reference = np.array([1.1, 1.1])
    for row in volumes.itertuples():
        seen = population["objectives"][population["generation"] <= row.generation]
        front = seen[non_dominated_fronts(seen)[0]]
        assert row.hypervolume == pytest.approx(hypervolume(front, reference))
        # NSGA-II's own metric is of its survivors, a subset of everything evaluated so far.
        assert row.recorded_hypervolume == recorded.value[recorded.policy_version == row.generation][0]
        assert row.hypervolume >= row.recorded_hypervolume - 1e-12
    assert list(volumes["generation"]) == sorted(set(population["generation"]))
    done = run_script("pareto", nsga2_path, emogi_path, "--out", tmp_path / "both")  # default reference
    succeeded(done, tmp_path / "both", {"pareto_fronts.png", "pareto_by_generation_emogi_pong.png"})
    table = pd.read_csv(tmp_path / "both" / "pareto.csv").set_index("run")
    assert table.loc["emogi_pong", "individuals"] == 4 and table.loc["nsga2_zdt1", "individuals"] == 12 * 24
    wrong = run_script("pareto", nsga2_path, "--reference", 1.1, "--out", tmp_path / "wrong")
    assert wrong.returncode == 2 and "--reference has 1 values" in wrong.stderr


def test_lineage_family_trees(nsga2_path: Path, pbt_path: Path, emogi_path: Path, tmp_path: Path) -> None:
    done = run_script("lineage", nsga2_path, pbt_path, emogi_path, "--out", tmp_path)
    succeeded(done, tmp_path, {"lineage_nsga2_zdt1.png", "lineage_pbt_tiny.png", "lineage_emogi_pong.png",
                               "hyperparameters_pbt_tiny.png"})
    table = pd.read_csv(tmp_path / "lineage.csv").set_index("run")
    for path in (nsga2_path, emogi_path):
        with open_run(path) as reader:
            population = reader.population()
        known = set(population["id"])
        expected = {(int(parent), int(child)) for child, parents in zip(population["id"], population["parent_ids"])
                    for parent in parents if parent in known and parent != child}
        edges = pd.read_csv(tmp_path / f"lineage_{path.stem}.csv")
        assert set(zip(edges["parent_id"], edges["child_id"])) == expected
        assert table.loc[path.stem, "individuals"] == len(population["id"])
        assert table.loc[path.stem, "surviving_lines"] <= table.loc[path.stem, "first_generation"]
    hyperparameters = pd.read_csv(tmp_path / "hyperparameters_pbt_tiny.csv")
    with open_run(pbt_path) as reader:
        learning_rates = reader.genome_columns()["learning_rate"]
    np.testing.assert_allclose(sorted(hyperparameters.loc[hyperparameters["hyperparameter"] == "learning_rate",
                                                          "value"]), sorted(learning_rates))


def test_league_payoff_and_elo(league_path: Path, tmp_path: Path) -> None:
    done = run_script("league", league_path, "--out", tmp_path)
    succeeded(done, tmp_path, {"payoff_league_rps.png", "elo_league_rps.png"})
    payoff = pd.read_csv(tmp_path / "payoff_league_rps.csv").set_index("member")
    table = pd.read_csv(tmp_path / "league.csv")
    with h5py.File(league_path, "r", swmr=True) as file:  # the group as lamarckian_hpc.league.store wrote it
        count = int(file["league/members/count"][0])
        names = [name.decode() for name in file["league/member_names"][:count]]
        played = file["league/results/games"][:count, :count] > 0
        stored = file["league/payoff"][:count, :count]
        rating = file["league/rating"][:count]
    assert list(payoff.index) == names == list(table["member"])
    np.testing.assert_allclose(payoff.to_numpy()[played], stored[played])
    assert np.isnan(payoff.to_numpy()[~played]).all()
    np.testing.assert_allclose(table["elo"], rating)
    assert table.loc[0, "role"] == "main agent"


@pytest.fixture(scope="module")
def empty_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run killed before its first metrics row: a run file with nothing to draw."""
    path = tmp_path_factory.mktemp("empty") / "empty.h5"
    RunWriter(path, {"algorithm": {"name": "ppo"}}, ["episode_return_mean"]).close()
    return path


@pytest.mark.parametrize(("script", "fixture", "missing", "writer"), [
    ("learning_curves", "empty_run", "rows of a progress metric", "train and evolve runs"),
    ("staleness", "nsga2_path", "/metrics/staleness_mean rows", "train runs"),
    ("scaling", "nsga2_path", "/metrics/env_frames_per_second rows", "train runs"),
    ("pareto", "ppo_path", "/population with two objectives", "multi-objective evolve runs"),
    ("lineage", "ppo_path", "/population (generation, id, parent_ids)", "evolve runs"),
    ("league", "ppo_path", "/league group", "league runs"),
    ("trajectories", "nsga2_path", "recorded episodes (/trajectories)", "`storage.trajectories.every_episodes` > 0"),
])
def test_a_run_without_the_data_is_one_line(script: str, fixture: str, missing: str, writer: str,
                                            request: pytest.FixtureRequest, tmp_path: Path) -> None:
    path = request.getfixturevalue(fixture)
    done = run_script(script, path, "--out", tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"error: {path} has no {missing}"), done.stderr
    assert f"it is written by {writer}" in done.stderr


def test_missing_and_foreign_files_are_one_line(ppo_path: Path, tmp_path: Path) -> None:
    not_a_run = tmp_path / "notes.h5"
    not_a_run.write_text("not a run")
    for path, message in ((tmp_path / "missing.h5", "error: no such run file"),
                          (not_a_run, "is not a readable run file")):
        done = run_script("league", path, "--out", tmp_path / "out")
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
    done = run_script("learning_curves", ppo_path, tmp_path / "missing.h5", "--out", tmp_path / "out")
    assert done.returncode == 2 and done.stderr.splitlines()[-1] == f"error: no such run file: {tmp_path}/missing.h5"


def test_a_folder_skips_runs_without_the_data_and_files_that_are_not_runs(ppo_path: Path, nsga2_path: Path, tmp_path: Path) -> None:
    folder = tmp_path / "runs"
    folder.mkdir()
    for path in (ppo_path, nsga2_path):
        (folder / path.name).write_bytes(path.read_bytes())
    (folder / "notes.h5").write_text("not a run")
    done = run_script("pareto", folder, "--out", tmp_path / "out")
    assert done.returncode == 0 and f"skipped: {folder / ppo_path.name} has no /population" in done.stderr
    assert f"skipped: {folder / 'notes.h5'} is not a readable run file" in done.stderr
    assert "| nsga2_zdt1 |" in done.stdout and "ppo_serial" not in done.stdout


def read_scalars(event_file: Path) -> dict[str, list[tuple[int, float, float]]]:
    """(step, wall time, value) of every scalar in a TensorBoard event file, by tag: the file is a
    TFRecord stream (length, its masked CRC-32C, an Event protobuf, its masked CRC-32C)."""
    from tensorboardX.proto.event_pb2 import Event
    from tensorboardX.record_writer import masked_crc32c

    data, offset = event_file.read_bytes(), 0
    scalars: dict[str, list[tuple[int, float, float]]] = defaultdict(list)
    while offset < len(data):
        header = data[offset:offset + 8]
        (length,), (header_crc,) = struct.unpack("<Q", header), struct.unpack("<I", data[offset + 8:offset + 12])
        assert header_crc == masked_crc32c(header)
        record = data[offset + 12:offset + 12 + length]
        assert struct.unpack("<I", data[offset + 12 + length:offset + 16 + length])[0] == masked_crc32c(record)
        offset += 16 + length
        event = Event.FromString(record)
        for value in event.summary.value:
            scalars[value.tag].append((event.step, event.wall_time, value.simple_value))
    return scalars


def test_export_writes_tensorboard_events_and_csv_of_the_metric_rows(ppo_path: Path, pbt_path: Path,
                                                                      tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture) -> None:
    pytest.importorskip("tensorboardX", reason="the export extra")
    board, tables = tmp_path / "tensorboard", tmp_path / "csv"
    assert main(["export", str(ppo_path), str(pbt_path), "--tensorboard", str(board), "--csv", str(tables)]) == 0
    assert main(["export", str(ppo_path), "--tensorboard", str(board)]) == 0  # again: replaces its own export
    assert "[2/2] exporting" in capsys.readouterr().err
    for path in (ppo_path, pbt_path):
        event_files = list((board / path.stem).glob("events.out.tfevents.*"))
        assert len(event_files) == 1
        scalars = read_scalars(event_files[0])
        with open_run(path) as reader:
            start = start_seconds(reader.meta)
            metrics = {name: series for name, series in reader.metrics().items() if len(series)}
        assert start > 1e9 and set(scalars) == set(metrics)
        for name, series in metrics.items():
            steps, wall_times, values = map(np.array, zip(*scalars[name]))
            np.testing.assert_array_equal(steps, series.env_frames)
            np.testing.assert_array_equal(values.astype(np.float32), series.value.astype(np.float32))
            np.testing.assert_allclose(wall_times, start + series.wall_time, rtol=0, atol=1e-5)
            table = pd.read_csv(tables / path.stem / f"{name}.csv", float_precision="round_trip")
            assert list(table.columns) == ["wall_time", "env_frames", "policy_version", "value"]
            for column in table.columns:
                np.testing.assert_array_equal(table[column], getattr(series, column))


def test_export_errors_are_one_line(ppo_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    for arguments, message in (([str(ppo_path)], "export needs at least one of --tensorboard DIR, --csv DIR, --onnx DIR"),
                               ([str(tmp_path / "missing.h5"), "--csv", str(tmp_path)], "no such run file"),
                               ([str(ROOT / "README.md"), "--csv", str(tmp_path)], "is not a readable run file")):
        assert main(["export", *arguments]) == 2
        error = capsys.readouterr().err
        assert message in error and error.count("\n") == 1, error
