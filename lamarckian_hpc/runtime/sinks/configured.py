"""The live sinks a config's `storage` section asks for, made in one place for every workload.

Apart from `runtime.sinks.base`, whose base class the sinks extend, so that the sinks' modules and the
one that chooses among them do not import each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .base import MetricSink, flat_parameters


def build_sinks(config: Any, run_path: str | Path, *, resumed: bool = False,
                genome_names: Sequence[str] = ()) -> list[MetricSink]:
    """Every sink a config's `storage` section asks for (`tensorboard`, `wandb`, `mlflow`), each
    named after the run file; the config, resolved, is the W&B and MLflow runs' parameters. Empty
    when it asks for none."""
    storage = config.storage
    name = Path(run_path).stem
    sinks: list[MetricSink] = []
    if storage.tensorboard is not None:
        from .tensorboard import TensorBoardSink

        sinks.append(TensorBoardSink(storage.tensorboard, name, storage.metrics_interval_seconds,
                                     resumed=resumed, genome_names=genome_names))
    if storage.wandb is not None or storage.mlflow is not None:
        from .tracking import MlflowSink, WandbSink

        parameters = flat_parameters(config.to_json_dict())
        if storage.wandb is not None:
            sinks.append(WandbSink(storage.wandb, name, parameters, storage.metrics_interval_seconds,
                                   resumed=resumed, genome_names=genome_names))
        if storage.mlflow is not None:
            sinks.append(MlflowSink(storage.mlflow, name, parameters, storage.metrics_interval_seconds,
                                    resumed=resumed, genome_names=genome_names))
    return sinks
