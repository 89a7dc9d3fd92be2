"""The live TensorBoard sink (`storage.tensorboard: DIR`, `--tensorboard DIR`): a run's metrics as
TensorBoard event files while it runs, in `DIR/<run name>/`, so that `tensorboard --logdir DIR`
shows a job that is still going, next to the runs before it.

It is an observer, like the run file's recorder: of a trainer's update reports (`on_update_end`,
every workload that trains: serial, distributed and launched runs alike, in the process that writes
the run file) and of the population workflow's generation reports (`on_generation_end`: PBT, EMOGI,
NSGA-II and the other evolution runs, game testing, the league). It writes what the run file gets,
under the run file's metric names, at the step of the run file's rows: env frames in training, the
generation (the rows' `policy_version`: a PBT interval, an EMOGI or league generation) in a
population run, whose env frames need not grow (EMOGI's count a generation's offspring); and it
flushes when the run file does: every
`storage.metrics_interval_seconds` in training, every generation in a population run. A PBT run
also gets one series per member slot from its `/population` rows: `member_<slot>/objective` (the
member's score, its mean return) and `member_<slot>/<hyperparameter>`, at the interval's step. A league's per-learner series
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
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..storage.event_files import EventWriter, event_folder
from .observers import GenerationReport, TrainResult, UpdateReport

log = logging.getLogger(__name__)


class TensorBoardSink:
    """Writes the reports it observes to `out_dir/<run_name>/`; `resumed` for a run that continues
    an earlier one's run file (and event files)."""

    def __init__(self, out_dir: str | Path, run_name: str, interval_seconds: float, *, resumed: bool = False,
                 genome_names: Sequence[str] = ()) -> None:
        self.folder = event_folder(out_dir, run_name)
        self.interval_seconds = interval_seconds
        self.genome_names = tuple(genome_names)
        self._resumed = resumed
        self._writer: EventWriter | None = None
        self.failed = False
        self._last_flush = time.monotonic()

    def _fail(self, error: BaseException) -> None:
        self.failed = True
        log.warning("TensorBoard sink %s stopped, the run goes on (its run file has every metric): %s",
                    self.folder, f"{type(error).__name__}: {error}".splitlines()[0])
        writer, self._writer = self._writer, None
        if writer is not None:
            try:
                writer.close()
            except Exception:  # noqa: BLE001 - already failing; the one line above says why
                pass

    def write(self, scalars: Mapping[str, float], step: int, *, flush: bool) -> None:
        """Add one event of `scalars` at `step`; flush the file when `flush`. Never raises."""
        if self.failed:
            return
        try:
            if self._writer is None:  # made at the first report: a resumed run's first step is the purge step
                self._writer = EventWriter(self.folder, purge_step=step if self._resumed else None)
            self._writer.scalars(scalars, step)
            if flush:
                self._writer.flush()
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
        """Flush and close the event file; a run's end. Never raises."""
        writer, self._writer = self._writer, None
        if writer is None:
            return
        try:
            writer.close()
        except Exception as error:  # noqa: BLE001
            self._fail(error)


def tensorboard_sink(storage: Any, run_path: str | Path, *, resumed: bool = False,
                     genome_names: Sequence[str] = ()) -> TensorBoardSink | None:
    """The sink a config's `storage` section asks for (`storage.tensorboard`), named after the run
    file; None when it asks for none."""
    if storage.tensorboard is None:
        return None
    return TensorBoardSink(storage.tensorboard, Path(run_path).stem, storage.metrics_interval_seconds,
                           resumed=resumed, genome_names=genome_names)
