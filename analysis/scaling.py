"""Throughput and staleness against cores, from several training runs (the paper's Fig. 7).

    python analysis/scaling.py RUN.h5 [RUN.h5 ...] --out DIR [--sampling sampling.json]

A run's cores are its actor processes, one core each: 1 for runtime.mode=serial, else
runtime.num_actors, else the actors that connected (/meta actors_connected). Its throughput is the
mean of env_frames_per_second (sampled) and trained_frames_per_second without the start-up row.
Runs are compared within a series (algorithm, env, serial or broadcast). --sampling adds the
points of the sampling benchmark's results. Writes throughput_vs_cores.png and
staleness_vs_cores.png with a CSV beside each, and scaling.csv (one row per run), which it prints.
"""

from __future__ import annotations

import sys
from pathlib import Path

from lamarckian_hpc.analysis.benchmarks import read_results, sampling_frame
from lamarckian_hpc.analysis.command import run_script, script_parser
from lamarckian_hpc.analysis.scaling import NEEDS, scaling_analysis


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("--sampling", type=Path, metavar="JSON", help="the sampling benchmark's results file")
    args = parser.parse_args(argv)
    if args.sampling is not None and not args.sampling.is_file():
        parser.error(f"--sampling: no such file: {args.sampling}")
    sampling = sampling_frame(read_results(args.sampling)) if args.sampling is not None else None
    return run_script("scaling", args.runs, args.out, NEEDS, lambda runs: scaling_analysis(runs, args.out, sampling))


if __name__ == "__main__":
    sys.exit(main())
