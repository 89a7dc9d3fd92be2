"""The Weights & Biases and MLflow sinks (`storage.wandb`, `storage.mlflow`): a run's metrics sent to
a tracking service while it runs, beside its run file, for teams that compare runs there.

They are live sinks of `runtime.sinks.base`, like the TensorBoard one: the run file's metric names at the
run file's steps (env frames in training, the generation in a population run), a PBT member's
series as `member_<slot>/...`, flushed with the run file; and the resolved config, flattened to
dotted keys (`ppo.learning_rate`), as the run's parameters. Each process that writes a run file
makes one tracking run named after it; a resumed run makes another of the same name, whose steps
start at the checkpoint's.

wandb and mlflow are optional (the `wandb` and `mlflow` extras) and imported at a sink's first
report; a missing one, a service that is down or a full disk cost one log line, and the run goes on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from .base import MetricSink, SinkMissing, parameter_text

WANDB_INSTALL = 'pip install -c constraints.txt -e ".[wandb]"'
MLFLOW_INSTALL = 'pip install -c constraints.txt -e ".[mlflow]"'
MLFLOW_PARAMS_PER_BATCH = 100  # MLflow's log_batch limits
MLFLOW_METRICS_PER_BATCH = 1000


class WandbSink(MetricSink):
    """One W&B run per run file, named after it, in `settings.project`; `mode: offline` writes it to
    `settings.directory`/wandb/offline-run-* for `wandb sync`."""

    kind = "W&B"
    log = logging.getLogger(__name__)

    def __init__(self, settings: Any, run_name: str, parameters: Mapping[str, Any], interval_seconds: float, *,
                 resumed: bool = False, genome_names: Sequence[str] = ()) -> None:
        super().__init__(f"{settings.project}/{run_name}", interval_seconds, genome_names=genome_names)
        self.settings = settings
        self.run_name = run_name
        self.parameters = dict(parameters)
        self.resumed = resumed
        self._run: Any = None

    def _start(self) -> Any:
        try:
            import wandb
        except ImportError:
            raise SinkMissing(f"wandb is not installed: {WANDB_INSTALL}") from None
        settings = self.settings
        return wandb.init(project=settings.project, entity=settings.entity, group=settings.group,
                          name=self.run_name, mode=settings.mode, config=self.parameters,
                          dir=None if settings.directory is None else str(settings.directory),
                          tags=["resumed"] if self.resumed else None,
                          reinit="create_new",  # never the caller's own W&B run, if it has one
                          settings=wandb.Settings(console="off"))  # the run's terminal output stays its own

    def _write(self, scalars: Mapping[str, float], step: int) -> None:
        if self._run is None:
            self._run = self._start()
        self._run.log(dict(scalars), step=step)

    def _close(self) -> None:
        run, self._run = self._run, None
        if run is not None:
            run.finish(exit_code=1 if self.failed else 0)


class MlflowSink(MetricSink):
    """One MLflow run per run file, named after it, in experiment `settings.experiment` (made when
    missing) of the tracking server or store at `settings.tracking_uri`. Metrics are sent in
    batches when the run file flushes."""

    kind = "MLflow"
    log = logging.getLogger(__name__)

    def __init__(self, settings: Any, run_name: str, parameters: Mapping[str, Any], interval_seconds: float, *,
                 resumed: bool = False, genome_names: Sequence[str] = ()) -> None:
        super().__init__(f"{settings.experiment}/{run_name} at {settings.tracking_uri or 'MLFLOW_TRACKING_URI'}",
                         interval_seconds, genome_names=genome_names)
        self.settings = settings
        self.run_name = run_name
        self.parameters = dict(parameters)
        self.resumed = resumed
        self._client: Any = None
        self._run_id: str | None = None
        self._pending: list[Any] = []

    def _start(self) -> None:
        try:
            from mlflow.entities import Param
            from mlflow.tracking import MlflowClient
        except ImportError:
            raise SinkMissing(f"mlflow is not installed: {MLFLOW_INSTALL}") from None
        client = MlflowClient(tracking_uri=self.settings.tracking_uri)
        experiment = client.get_experiment_by_name(self.settings.experiment)
        experiment_id = (experiment.experiment_id if experiment is not None
                         else client.create_experiment(self.settings.experiment))
        run = client.create_run(experiment_id, run_name=self.run_name,
                                tags={"lamarckian_hpc.resumed": "true"} if self.resumed else None)
        params = [Param(key, parameter_text(value)) for key, value in self.parameters.items()]
        for start in range(0, len(params), MLFLOW_PARAMS_PER_BATCH):
            client.log_batch(run.info.run_id, params=params[start:start + MLFLOW_PARAMS_PER_BATCH])
        self._client, self._run_id = client, run.info.run_id

    def _write(self, scalars: Mapping[str, float], step: int) -> None:
        if self._client is None:
            self._start()
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._pending.extend(Metric(name, float(value), now, step) for name, value in scalars.items())

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        for start in range(0, len(pending), MLFLOW_METRICS_PER_BATCH):
            self._client.log_batch(self._run_id, metrics=pending[start:start + MLFLOW_METRICS_PER_BATCH])

    def _close(self) -> None:
        client, self._client = self._client, None
        if client is not None and not self.failed:  # a failed sink does not call the service again
            client.set_terminated(self._run_id, "FINISHED")
