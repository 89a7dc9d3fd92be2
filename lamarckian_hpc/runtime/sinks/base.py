"""Live metric sinks: the run's metrics sent elsewhere while it runs (TensorBoard event files,
Weights & Biases, MLflow), one mechanism for all of them.

A sink is an observer, like the run file's recorder: of a trainer's update reports
(`on_update_end`, every workload that trains: serial, distributed and launched runs alike, in the
process that writes the run file) and of the population workflow's generation reports
(`on_generation_end`: PBT, EMOGI, NSGA-II and the other evolution runs, game testing, the league),
so neither the training loop nor the population workflow knows about any of them. Every sink gets
what the run file gets, under the run file's metric names, at the step of the run file's rows: env
frames in training, the generation (the rows' `policy_version`) in a population run; and flushes
when the run file does: every `storage.metrics_interval_seconds` in training, every generation in a
population run. A PBT run also gets one series per member slot from its `/population` rows:
`member_<slot>/objective` and `member_<slot>/<hyperparameter>`.

A sink never stops a run: its first failure (its library missing, a full disk, a service that is
down) is logged in one line and it writes nothing more; the run file, which has every metric, is not
touched. `configured_sinks.build_sinks` makes the sinks a config's `storage` section asks for, in
one place for every workload.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..observers import GenerationReport, TrainResult, UpdateReport


class SinkMissing(ImportError):
    """A sink's optional library is not installed; the message is one line with the install command."""


class MetricSink:
    """What every live sink shares: when to write and flush, the PBT members' series, and the one
    log line of a failure. A sink implements `_write` (add scalars at a step), `_flush` and
    `_close`; any of them may raise, and the first exception stops that sink alone."""

    kind = "metric"  # the sink's name in its log line
    log = logging.getLogger(__name__)

    def __init__(self, where: str, interval_seconds: float, *, genome_names: Sequence[str] = ()) -> None:
        self.where = where  # where it writes, for its log line
        self.interval_seconds = interval_seconds
        self.genome_names = tuple(genome_names)
        self.failed = False
        self._last_flush = time.monotonic()

    def _write(self, scalars: Mapping[str, float], step: int) -> None:
        raise NotImplementedError

    def _flush(self) -> None:
        pass

    def _close(self) -> None:
        pass

    def _fail(self, error: BaseException) -> None:
        self.failed = True
        self.log.warning("%s sink %s stopped, the run goes on (its run file has every metric): %s", self.kind,
                         self.where, (f"{type(error).__name__}: {error}".strip().splitlines() or ["?"])[0])
        try:
            self._close()
        except Exception:  # noqa: BLE001 - already failing; the one line above says why
            pass

    def write(self, scalars: Mapping[str, float], step: int, *, flush: bool) -> None:
        """Add `scalars` at `step`; flush when `flush`. Never raises."""
        if self.failed:
            return
        try:
            self._write(scalars, step)
            if flush:
                self._flush()
                self._last_flush = time.monotonic()
        except Exception as error:  # noqa: BLE001 - a sink must never stop the run
            self._fail(error)

    def on_update_end(self, report: UpdateReport) -> None:
        due = time.monotonic() - self._last_flush >= self.interval_seconds
        self.write(report.metrics, report.env_frames, flush=due)

    def on_train_end(self, result: TrainResult) -> None:
        self.close()

    def on_generation_end(self, report: GenerationReport) -> None:
        scalars = dict(report.metrics)
        if report.members and report.rows is not None:
            scalars.update(self._member_scalars(report.rows))
        self.write(scalars, report.generation, flush=True)

    def _member_scalars(self, rows: Mapping[str, Any]) -> dict[str, float]:
        """`member_<slot>/objective` (`objective_<k>` for several) and `member_<slot>/<genome name>`
        of each member's row."""
        count = len(rows["id"])
        objectives = np.asarray(rows["objectives"], dtype=np.float64).reshape(count, -1)
        genomes = np.asarray(rows["genome"], dtype=np.float64).reshape(count, -1)
        names = (self.genome_names if len(self.genome_names) == genomes.shape[1]
                 else tuple(f"genome_{k}" for k in range(genomes.shape[1])))
        objective_names = ("objective",) if objectives.shape[1] == 1 else tuple(
            f"objective_{k}" for k in range(objectives.shape[1]))
        scalars: dict[str, float] = {}
        for slot in range(count):
            row = [*objectives[slot], *genomes[slot]]
            scalars.update({f"member_{slot}/{name}": float(value) for name, value in zip(objective_names + names, row)})
        return scalars

    def close(self) -> None:
        """Flush and close; a run's end (or a failed run's, which keeps its last reports). Never raises."""
        if self.failed:
            return
        try:
            self._flush()
            self._close()
        except Exception as error:  # noqa: BLE001
            self._fail(error)


def flat_parameters(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """The resolved config as a tracking service's run parameters: nested sections as dotted keys
    (`ppo.learning_rate`), values as the run file's JSON has them (lists and null included)."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flat_parameters(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def parameter_text(value: Any) -> str:
    """A parameter's value as text (MLflow's parameters are strings): strings as they are, the rest as JSON."""
    return value if isinstance(value, str) else json.dumps(value)
