"""What every script in the repository's `analysis/` folder shares, so that each script is only its
arguments and one call: reading the run files it was given (with progress when there are several),
the one-line errors (exit status 2) for a missing file, a file that is not a run file and a run
without the data the script draws, writing each figure's rows as CSV beside its PNG and the
summary table as `<topic>.csv`, and printing that table.

The figures themselves are drawn by the topic functions (`learning_curve_analysis`, ...) that
`lamarckian-hpc report` calls too; nothing here draws.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from .loader import MissingDataError, Requirement, RunData, RunFileError, find_run_files, load_run
from .plotting import Analysis
from .tables import markdown_table

USAGE_ERROR = 2


def script_parser(description: str) -> argparse.ArgumentParser:
    """The arguments every script takes: run files (or folders of them) and `--out DIR`."""
    parser = argparse.ArgumentParser(description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", metavar="RUN.h5",
                        help="run files, or folders searched for *.h5 (runs there without the data are skipped)")
    parser.add_argument("--out", required=True, type=Path, metavar="DIR",
                        help="folder for the PNG figures and CSV tables (made if missing)")
    return parser


def load_runs(paths: Sequence[str | Path], needs: Requirement, progress: TextIO | None = None) -> list[RunData]:
    """The runs at `paths`, each checked against `needs`. A file named on the command line that is
    missing, not a run file, or without the data ends everything with one RunFileError; a file
    found in a folder that is not readable or lacks the data is skipped with a note (`progress`,
    stderr by default, also gets a line per file when there are several)."""
    progress = progress if progress is not None else sys.stderr
    candidates: list[tuple[Path, bool]] = []
    for text in paths:
        path = Path(text)
        if path.is_dir():
            found = find_run_files(path)
            if not found:
                raise RunFileError(f"error: {path} holds no run files (.h5)")
            candidates += [(file, False) for file in found]
        else:
            candidates.append((path, True))
    runs = []
    for index, (path, named) in enumerate(candidates, start=1):
        if len(candidates) > 1:
            print(f"[{index}/{len(candidates)}] reading {path}", file=progress, flush=True)
        if not path.exists():
            raise RunFileError(f"error: no such run file: {path}")
        if named:
            run = load_run(path)
            needs.check(run)
        else:
            try:
                run = load_run(path)
            except RunFileError as error:
                print(f"skipped: {str(error).removeprefix('error: ')}", file=progress)
                continue
            if not needs.holds(run):
                print(f"skipped: {path} has no {needs.what}", file=progress)
                continue
        runs.append(run)
    if not runs:
        raise MissingDataError(f"error: no run given has {needs.what}; it is written by {needs.written_by}")
    return runs


def write_outputs(analysis: Analysis, out_dir: Path, topic: str) -> list[Path]:
    """Each figure's rows as CSV beside its PNG (same name), and the table as `<topic>.csv`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for figure in analysis.figures:
        csv_path = figure.path.with_suffix(".csv")
        figure.data.to_csv(csv_path, index=False)
        written += [figure.path, csv_path]
    table_path = out_dir / f"{topic}.csv"
    analysis.table.to_csv(table_path, index=False)
    return written + [table_path]


def run_script(topic: str, paths: Sequence[str | Path], out_dir: Path, needs: Requirement,
               analyse: Callable[[list[RunData]], Analysis]) -> int:
    """Reads the runs at `paths`, calls `analyse(runs)`, writes its outputs to `out_dir` and prints
    its table (Markdown, on stdout; progress and the files written go to stderr). Returns the exit
    status: 0, or 2 after one line on stderr for a file that is missing, not a run file or without
    the data."""
    try:
        runs = load_runs(paths, needs)
        analysis = analyse(runs)
    except RunFileError as error:
        print(error, file=sys.stderr)
        return USAGE_ERROR
    written = write_outputs(analysis, out_dir, topic)
    print(markdown_table(analysis.table), end="")
    print(f"{len(runs)} run(s), {len(analysis.figures)} figure(s); wrote {len(written)} files to {out_dir}",
          file=sys.stderr)
    return 0
