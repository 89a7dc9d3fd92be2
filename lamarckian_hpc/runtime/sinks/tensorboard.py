"""The live TensorBoard sink (`storage.tensorboard: DIR`, `--tensorboard DIR`): a run's metrics as
TensorBoard event files while it runs, in `DIR/<run name>/`, so that `tensorboard --logdir DIR`
shows a job that is still going, next to the runs before it.

It is one of the live sinks of `runtime.sinks.base` (with Weights & Biases and MLflow), an observer of a
trainer's update reports and of the population workflow's generation reports. It writes what the run
file gets, under the run file's metric names, at the step of the run file's rows: env frames in
training, the generation (the rows' `policy_version`: a PBT interval, an EMOGI or league generation)
in a population run, whose env frames need not grow (EMOGI's count a generation's offspring); and it
flushes when the run file does: every `storage.metrics_interval_seconds` in training, every
generation in a population run. A PBT run also gets one series per member slot from its
`/population` rows: `member_<slot>/objective` (the member's score, its mean return) and
`member_<slot>/<hyperparameter>`, at the interval's step. A league's per-learner series
(`elo_<learner>`, `return_<learner>`, `win_rate_vs_targets_<learner>`) and NSGA-II's `hypervolume`
are run-file metrics already.

A resumed run writes a new event file in the same folder whose first step purges what the run
before it wrote from there on (see `storage.event_files`), so the series continue without going
back in steps. The sink never stops a run: the first failure (tensorboardX missing, a full disk,
a folder it cannot make) is logged in one line and the sink writes nothing more; the run file, which
has every metric, is not touched.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

from ...storage.event_files import EventWriter, event_folder
from .base import MetricSink


class TensorBoardSink(MetricSink):
    """Writes the reports it observes to `out_dir/<run_name>/`; `resumed` for a run that continues
    an earlier one's run file (and event files)."""

    kind = "TensorBoard"
    log = logging.getLogger(__name__)

    def __init__(self, out_dir: str | Path, run_name: str, interval_seconds: float, *, resumed: bool = False,
                 genome_names: Sequence[str] = ()) -> None:
        self.folder = event_folder(out_dir, run_name)
        super().__init__(str(self.folder), interval_seconds, genome_names=genome_names)
        self._resumed = resumed
        self._writer: EventWriter | None = None

    def _write(self, scalars: Mapping[str, float], step: int) -> None:
        if self._writer is None:  # made at the first report: a resumed run's first step is the purge step
            self._writer = EventWriter(self.folder, purge_step=step if self._resumed else None)
        self._writer.scalars(scalars, step)

    def _flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    def _close(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
