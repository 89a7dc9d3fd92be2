"""Pareto fronts per generation and their hypervolume, for NSGA-II and EMOGI runs (Figs. 10, 11b).

    python analysis/pareto.py RUN.h5 [RUN.h5 ...] --out DIR [--reference R0 R1 ...]

Objectives are shown as stored (minimised; maximised ones negated). The front reached by a
generation is the non-dominated set of every individual evaluated up to it. Its hypervolume is
taken against --reference, or else against the worst value of each objective in the run plus a
tenth of its range; NSGA-II's own hypervolume metric is shown beside it. Writes pareto_fronts.png,
pareto_by_generation_<run>.png, hypervolume.png, a CSV beside each, and pareto.csv (one row per
run: its last generation's front), which it also prints.
"""

from __future__ import annotations

import sys

from lamarckian_hpc.analysis import Analysis, RunData
from lamarckian_hpc.analysis.command import run_script, script_parser
from lamarckian_hpc.analysis.pareto import NEEDS, objective_columns, pareto_analysis


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("--reference", type=float, nargs="+", metavar="R",
                        help="hypervolume reference point, one value per objective (as stored, minimised)")
    args = parser.parse_args(argv)

    def analyse(runs: list[RunData]) -> Analysis:
        if args.reference is not None:
            for run in runs:
                if len(objective_columns(run.population)) != len(args.reference):
                    parser.error(f"--reference has {len(args.reference)} values; {run.path} has "
                                 f"{len(objective_columns(run.population))} objectives")
        return pareto_analysis(runs, args.out, args.reference)

    return run_script("pareto", args.runs, args.out, NEEDS, analyse)


if __name__ == "__main__":
    sys.exit(main())
