"""What the library's `lamarckian_hpc.run` hands back: the run's result, or `RunFailed`.

The library raises and returns; it never picks an exit status's meaning for the caller nor prints
a result table. `RunFailed` carries the one line a user should read and the exit status the
commands end with, so that a command only prints and exits while a caller in Python (the Slurm job,
a notebook) gets an exception it can catch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Exit statuses of a run that did not finish: could not start (a bad config or run file), failed
#: on the way (a full disk, a stalled run), stopped by Ctrl-C.
CANNOT_START, FAILED, INTERRUPTED = 2, 1, 130


class RunFailed(Exception):
    """A run that could not start, failed or was interrupted; `str(error)` is one line saying why
    (and, where there is a run file to continue, how), `exit_status` what a command exits with."""

    def __init__(self, message: str, exit_status: int = FAILED) -> None:
        super().__init__(message)
        self.exit_status = exit_status


@dataclass(frozen=True)
class RunResult:
    """A finished run: where it wrote, which workload and algorithm ran, and the algorithm's own
    result (`summary`: a training run's `TrainResult`, PBT's `PBTResult`, EMOGI's `EMOGIResult`, an
    EC run's `EvolutionSummary`, a league's `LeagueSummary`, game testing's `GameTestingSummary`)."""

    path: Path
    workload: str        # train, evolve or league: the command that runs such a config
    algorithm: str       # the config's algorithm.name
    config: Any          # the validated config the run used
    summary: Any
    resumed: bool = False
