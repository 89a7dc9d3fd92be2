"""Family trees of evolve runs: NSGA-II, GA and EMOGI offspring and their parents, PBT's exploits.

    python analysis/lineage.py RUN.h5 [RUN.h5 ...] --out DIR

Each generation (PBT: interval) is a column of individuals, ranked by their first objective, each
joined to the parents it was made from (lineage_<run>.png; its CSV holds the parent links). PBT
runs also get each hyperparameter over time (hyperparameters_<run>.png). lineage.csv, which it
prints, has one row per run: individuals, generations, parent links, and how many of the first
generation's lines the last generation descends from.
"""

from __future__ import annotations

import sys

from lamarckian_hpc.analysis.command import run_script, script_parser
from lamarckian_hpc.analysis.lineage import NEEDS, lineage_analysis


def main(argv: list[str] | None = None) -> int:
    args = script_parser(__doc__).parse_args(argv)
    return run_script("lineage", args.runs, args.out, NEEDS, lambda runs: lineage_analysis(runs, args.out))


if __name__ == "__main__":
    sys.exit(main())
