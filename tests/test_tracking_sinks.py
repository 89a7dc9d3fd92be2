"""The Weights & Biases and MLflow sinks (`storage.wandb`, `storage.mlflow`), with the real libraries
and offline: a short training run's metrics read back from W&B's offline run file (its own record
format and protobufs) and from an MLflow file store (MlflowClient), under the run file's names, at
its rows' env frames, with the resolved config as the run's parameters; a PBT run's members each get
their series; a sink that fails, or whose extra is missing, costs one log line, never the run or
its run file.
"""

from __future__ import annotations

import json
import logging
import struct
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from optional_parts import require_extra

import lamarckian_hpc
from lamarckian_hpc.runtime.sinks.base import flat_parameters, parameter_text
from lamarckian_hpc.storage import open_run

ROOT = Path(__file__).resolve().parents[1]
SERIAL = ["runtime.mode=serial", "env.num_envs=4", "algorithm.batch_size=512", "algorithm.num_minibatches=2",
          "stop.target_return=null", "stop.total_env_steps=2048", "storage.metrics_interval_seconds=0.01"]
SINK_LOG = "lamarckian_hpc.runtime.sinks.tracking"
NAMES = ["learning_rate", "loss_policy", "env_frames_per_second", "episode_return_mean"]


@pytest.fixture
def wandb_offline(tmp_path, monkeypatch):
    require_extra("wandb", "wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")  # never the network, whatever a test's config says
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_dir"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    (tmp_path / "wandb_dir").mkdir()  # given as storage.wandb.directory too: wandb reads WANDB_DIR once a process
    return tmp_path / "wandb_dir"


@pytest.fixture
def mlflow_store(tmp_path, monkeypatch):
    require_extra("mlflow", "mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 keeps its file store behind this switch
    return f"file://{tmp_path / 'mlruns'}"


def wandb_records(folder: Path, wait_seconds: float = 30.0) -> list:
    """The records of the one offline W&B run under `folder`, once its run record is there: wandb's
    service process may still be writing the file when the run has finished on our side (seen on a
    loaded machine)."""
    deadline = time.monotonic() + wait_seconds
    while True:
        records = _read_wandb_file(folder)
        if any(record.WhichOneof("record_type") == "run" for record in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.5)


def _read_wandb_file(folder: Path) -> list:
    """The records of the one offline W&B run under `folder`, as wandb's own protobufs: the run file
    is a LevelDB-style log (a 7-byte header, then 32 KiB blocks of chunks: crc32c, length, type)."""
    from wandb.proto import wandb_internal_pb2

    [path] = folder.glob("wandb/offline-run-*/run-*.wandb")
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    records, pending, block, offset = [], b"", 32768, 7
    while offset + 7 <= len(data):
        if block - offset % block < 7:  # a block's tail too short for a chunk header is padding
            offset += block - offset % block
            continue
        _, length, kind = struct.unpack("<IHB", data[offset:offset + 7])
        if kind == 0 and length == 0:
            break
        pending += data[offset + 7:offset + 7 + length]
        offset += 7 + length
        if kind in (1, 4):  # a full record, or the last chunk of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def wandb_history(records: list) -> dict[str, list[tuple[int, float]]]:
    series: dict[str, list[tuple[int, float]]] = {}
    for record in records:
        if record.WhichOneof("record_type") != "history":
            continue
        items = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
        for name, value in items.items():
            if not name.startswith("_"):  # W&B's own _step, _runtime, _timestamp
                series.setdefault(name, []).append((int(items["_step"]), value))
    return series


def wandb_config(records: list) -> dict[str, object]:
    config: dict[str, object] = {}
    for record in records:
        kind = record.WhichOneof("record_type")
        updates = record.run.config.update if kind == "run" else record.config.update if kind == "config" else ()
        config.update({item.key: json.loads(item.value_json) for item in updates})
    return {key: value["value"] if isinstance(value, dict) and "value" in value else value
            for key, value in config.items() if not key.startswith("_")}


def assert_matches_run_file(series: dict[str, list[tuple[int, float]]], run: Path, names: list[str],
                            step: str = "env_frames") -> None:
    """Each named series holds exactly the run file's rows of that metric: same steps, same values."""
    with open_run(run) as reader:
        assert reader.closed_cleanly
        for name in names:
            rows = reader.metric(name)
            assert [point for point, _ in series[name]] == getattr(rows, step).tolist(), name
            np.testing.assert_allclose([value for _, value in series[name]], rows.value, rtol=1e-6, err_msg=name)


def run_config(run: Path) -> dict[str, object]:
    with open_run(run) as reader:
        return flat_parameters(reader.config)


def test_a_training_run_goes_to_an_offline_wandb_run(tmp_path, wandb_offline):
    result = lamarckian_hpc.run(ROOT / "configs" / "ppo_cartpole.yaml", [
        *SERIAL, "storage.wandb.project=sinks", "storage.wandb.mode=offline",
        f"storage.wandb.directory={wandb_offline}"], output=tmp_path / "ppo.h5")
    records = wandb_records(wandb_offline)
    [run] = [record.run for record in records if record.WhichOneof("record_type") == "run"]
    assert (run.project, run.display_name) == ("sinks", "ppo")  # named after the run file
    series = wandb_history(records)
    with open_run(result.path) as reader:
        assert set(series) <= set(reader.metric_names())  # the run file's names, nothing of its own
    assert_matches_run_file(series, result.path, NAMES)
    config = wandb_config(records)
    expected = run_config(result.path)
    assert config == expected and config["algorithm.batch_size"] == 512 and "model.policy_hidden_sizes" in config


def test_a_training_run_goes_to_an_mlflow_run_with_its_config_as_parameters(tmp_path, mlflow_store):
    from mlflow.tracking import MlflowClient

    result = lamarckian_hpc.run(ROOT / "configs" / "ppo_cartpole.yaml", [
        *SERIAL, f"storage.mlflow.tracking_uri={mlflow_store}", "storage.mlflow.experiment=sinks"],
        output=tmp_path / "ppo.h5")
    client = MlflowClient(mlflow_store)
    [run] = client.search_runs([client.get_experiment_by_name("sinks").experiment_id])
    assert run.info.run_name == "ppo" and run.info.status == "FINISHED"
    with open_run(result.path) as reader:
        assert set(run.data.metrics) <= set(reader.metric_names())
    series = {name: [(point.step, point.value) for point in client.get_metric_history(run.info.run_id, name)]
              for name in NAMES}
    assert_matches_run_file(series, result.path, NAMES)
    params = client.get_run(run.info.run_id).data.params
    assert params == {key: parameter_text(value) for key, value in run_config(result.path).items()}
    assert params["algorithm.batch_size"] == "512" and params["stop.target_return"] == "null"


def test_pbt_members_get_a_series_each_in_mlflow_and_wandb(tmp_path, mlflow_store, wandb_offline):
    from mlflow.tracking import MlflowClient

    pbt = lamarckian_hpc.run(ROOT / "configs" / "pbt_ppo_cartpole.yaml", [
        "runtime.mode=serial", "algorithm.population_size=2", "algorithm.interval_env_frames=256",
        "stop.total_env_frames=768", "ppo.num_epochs=1", "stop.target_return=null",
        f"storage.mlflow.tracking_uri={mlflow_store}", "storage.wandb.mode=offline",
        f"storage.wandb.directory={wandb_offline}"],
        output=tmp_path / "pbt.h5").path
    client = MlflowClient(mlflow_store)
    [run] = client.search_runs([client.get_experiment_by_name("lamarckian-hpc").experiment_id])

    def history(name: str) -> list[tuple[int, float]]:
        return [(point.step, point.value) for point in client.get_metric_history(run.info.run_id, name)]

    for series in ({name: history(name) for name in run.data.metrics}, wandb_history(wandb_records(wandb_offline))):
        assert_matches_run_file(series, pbt, ["best_return", "median_return"], "policy_version")
        steps = [step for step, _ in series["best_return"]]
        with open_run(pbt) as reader:
            population = reader.population()
            names = reader.genome_columns()
        for slot in range(2):  # row `slot` of each interval is member slot `slot`
            mine = np.flatnonzero(np.arange(len(population["id"])) % 2 == slot)
            assert [step for step, _ in series[f"member_{slot}/objective"]] == steps
            np.testing.assert_allclose([value for _, value in series[f"member_{slot}/objective"]],
                                       population["objectives"][mine, 0], rtol=1e-6)
            for name in names:  # the member's hyperparameters, by name
                np.testing.assert_allclose([value for _, value in series[f"member_{slot}/{name}"]],
                                           np.asarray(names[name])[mine], rtol=1e-6)


def sink_lines(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == SINK_LOG]


def assert_run_file_whole(run: Path) -> None:
    with open_run(run) as reader:
        assert reader.closed_cleanly
        assert reader.metric("learning_rate").env_frames.tolist() == list(range(512, 2049, 512))


def test_an_mlflow_store_it_cannot_write_logs_one_line_and_the_run_and_its_file_go_on(tmp_path, mlflow_store, caplog):
    in_the_way = tmp_path / "not_a_folder"
    in_the_way.write_text("a file where the MLflow store should go")
    with caplog.at_level(logging.WARNING, logger=SINK_LOG):
        result = lamarckian_hpc.run(ROOT / "configs" / "ppo_cartpole.yaml", [
            *SERIAL, f"storage.mlflow.tracking_uri=file://{in_the_way}/mlruns"], output=tmp_path / "ppo.h5")
    lines = sink_lines(caplog)
    assert len(lines) == 1 and "MLflow sink" in lines[0] and "stopped, the run goes on" in lines[0], lines
    assert "\n" not in lines[0]
    assert_run_file_whole(result.path)


def test_a_sink_whose_writes_raise_stops_alone_and_the_others_go_on(tmp_path, mlflow_store, wandb_offline, caplog):
    """The W&B run breaks after its first report (its run is finished under it, so each later log
    raises); MLflow still gets every row."""
    import wandb
    from mlflow.tracking import MlflowClient

    started = wandb.init

    def init_then_finish(*args, **kwargs):
        run = started(*args, **kwargs)
        run.finish()
        return run

    wandb.init = init_then_finish
    try:
        with caplog.at_level(logging.WARNING, logger=SINK_LOG):
            result = lamarckian_hpc.run(ROOT / "configs" / "ppo_cartpole.yaml", [
                *SERIAL, "storage.wandb.mode=offline", f"storage.wandb.directory={wandb_offline}",
                f"storage.mlflow.tracking_uri={mlflow_store}"],
                output=tmp_path / "ppo.h5")
    finally:
        wandb.init = started
    lines = sink_lines(caplog)
    assert len(lines) == 1 and lines[0].startswith("W&B sink lamarckian-hpc/ppo stopped, the run goes on"), lines
    assert_run_file_whole(result.path)
    client = MlflowClient(mlflow_store)
    [run] = client.search_runs([client.get_experiment_by_name("lamarckian-hpc").experiment_id])
    assert [point.step for point in client.get_metric_history(run.info.run_id, "learning_rate")] == \
        list(range(512, 2049, 512))


@pytest.mark.parametrize("extra", ["wandb", "mlflow"])
def test_a_missing_extra_is_one_line_with_its_install_command(tmp_path, monkeypatch, caplog, extra):
    monkeypatch.setitem(sys.modules, extra, None)  # as if not installed: its import raises ImportError
    for name in [name for name in sys.modules if name.startswith(f"{extra}.")]:
        monkeypatch.setitem(sys.modules, name, None)
    setting = "storage.wandb.mode=offline" if extra == "wandb" else f"storage.mlflow.tracking_uri=file://{tmp_path}/m"
    with caplog.at_level(logging.WARNING, logger=SINK_LOG):
        result = lamarckian_hpc.run(ROOT / "configs" / "ppo_cartpole.yaml", [*SERIAL, setting],
                                    output=tmp_path / "ppo.h5")
    lines = sink_lines(caplog)
    assert len(lines) == 1 and lines[0].endswith(f'is not installed: pip install -c constraints.txt -e ".[{extra}]"'), \
        lines
    assert_run_file_whole(result.path)
