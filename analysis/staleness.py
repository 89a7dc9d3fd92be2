"""Staleness of the trained samples: its histogram over each run, and against hosts across runs.

    python analysis/staleness.py RUN.h5 [RUN.h5 ...] --out DIR

Staleness is the learner's policy version minus the version that sampled a step. The histogram
adds up the per-update counts staleness_count_0 .. staleness_count_8plus over the whole run
(staleness_histogram.png); given two runs or more, staleness_vs_hosts.png draws the mean and the
largest staleness against the hosts each run spread over, one line per broadcast (hosts: the
run's simulated nodes, else the hosts its actors connected from, else /meta hosts). Writes a CSV
beside each figure and staleness.csv (one row per run), which it also prints.
"""

from __future__ import annotations

import sys

from lamarckian_hpc.analysis.command import run_script, script_parser
from lamarckian_hpc.analysis.staleness import NEEDS, staleness_analysis


def main(argv: list[str] | None = None) -> int:
    args = script_parser(__doc__).parse_args(argv)
    return run_script("staleness", args.runs, args.out, NEEDS, lambda runs: staleness_analysis(runs, args.out))


if __name__ == "__main__":
    sys.exit(main())
