"""Learning curves of runs against env frames and against wall time (the paper's Figs. 8 and 9).

    python analysis/learning_curves.py RUN.h5 [RUN.h5 ...] --out DIR [--metric NAME]

Each run is drawn on its progress metric (the return of RL runs, PBT's best member, EMOGI's best
score, the hypervolume or best objective of EC runs), or on --metric for every run. Writes
curve_<metric>_frames.png and curve_<metric>_wall_time.png, a CSV of each figure's rows beside it,
and learning_curves.csv (one row per run: rows, frames, first, min, max and final value), which
it also prints.
"""

from __future__ import annotations

import sys

from lamarckian_hpc.analysis.command import run_script, script_parser
from lamarckian_hpc.analysis.curves import NEEDS, learning_curve_analysis, metric_requirement


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("--metric", help="draw this metric of every run instead of each run's progress metric")
    args = parser.parse_args(argv)
    needs = NEEDS if args.metric is None else metric_requirement(args.metric)
    return run_script("learning_curves", args.runs, args.out, needs,
                      lambda runs: learning_curve_analysis(runs, args.out, args.metric))


if __name__ == "__main__":
    sys.exit(main())
