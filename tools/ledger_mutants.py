"""Mutation check of the credit ledger's state machine: does it, alone, catch a broken ledger?

Each mutant is a small hand-made change to `lamarckian_hpc/comm/credits.py` of a kind that broke,
or could break, the budget: credits a reclaimed sender holds left uncounted, a re-ask that writes
off grants still travelling, the clamp on a sender's claimed `spent` removed, and others. For each
mutant and seed, a fresh Python process loads the mutated module in place of the real one (nothing
is written into the repository) and runs only the Hypothesis state machine of
tests/test_credit_ledger.py (its 300-example run, a second-pass test), without shrinking. A mutant is killed by a seed when the test fails.
The unmutated ledger runs first and must pass every seed, or the table means nothing.

    python tools/ledger_mutants.py                  # every mutant, 5 seeds, report in ledger_mutants.json
    python tools/ledger_mutants.py --seeds 3 --only clamp_removed --report /tmp/r.json

Prints a Markdown table (mutant, seeds that killed it / seeds run) and writes the same as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LEDGER = ROOT / "lamarckian_hpc" / "comm" / "credits.py"
STATE_MACHINE = "tests/test_credit_ledger.py::test_the_ledger_holds_its_bounds_whatever_happens_at_length"


@dataclass(frozen=True)
class Mutant:
    name: str
    what: str
    original: str  # a line of credits.py, found exactly once
    mutated: str


MUTANTS = (
    Mutant("held_not_counted_after_reclaim",
           "a reclaimed sender that asks again starts an account holding nothing, whatever it holds",
           "            held = min(self.window(route), max(0, received - spent))",
           "            held = 0"),
    Mutant("re_ask_writes_off_travelling_grant",
           "a re-ask writes off the grants the sender has not received yet, as if lost",
           "            spent = min(spent, account.granted)",
           "            spent = min(spent + max(0, account.granted - received), account.granted)"),
    Mutant("clamp_removed",
           "the clamp on a sender's claimed `spent` is removed",
           "            spent = min(spent, account.granted)",
           "            spent = spent"),
    Mutant("no_fair_share",
           "a sender gets the window it asks for, not at most its share of the budget",
           "        return min(self.accounts[route].window, share)",
           "        return self.accounts[route].window"),
    Mutant("window_off_by_one",
           "a grant takes a sender one credit past its window",
           "            if account.outstanding >= self.window(route) or account.dormant:",
           "            if account.outstanding > self.window(route) or account.dormant:"),
    Mutant("pause_counts_as_silence",
           "the reclaim counts the time the learner did not listen as its senders' silence",
           "            if now - max(account.last_seen, self._listening_since) > self.reclaim_seconds:",
           "            if now - account.last_seen > self.reclaim_seconds:"),
    Mutant("grant_no_sign_of_life",
           "a grant does not restart the time an account has to spend its credits",
           "            account.last_seen = self.clock()  # it has `reclaim_seconds` to spend what it was given",
           "            pass"),
    Mutant("skip_returns_one",
           "a credited message that skips numbers returns one credit to the pool, not all it spent",
           "        self.in_flight -= number - account.spent",
           "        self.in_flight -= 1"),
)

#: Run in the child: load the ledger from argv[1] as lamarckian_hpc.comm.credits before anything
#: imports the real one, turn shrinking off (a failure is all that counts), and run the state machine.
CHILD = """
import importlib.util, sys
from hypothesis import Phase, settings
settings.register_profile("mutants", phases=[Phase.explicit, Phase.reuse, Phase.generate], database=None)
settings.load_profile("mutants")
import lamarckian_hpc
spec = importlib.util.spec_from_file_location("lamarckian_hpc.comm.credits", sys.argv[1])
module = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = module
spec.loader.exec_module(module)
import lamarckian_hpc.comm
assert lamarckian_hpc.comm.channels.CreditLedger is module.CreditLedger
import pytest
sys.exit(pytest.main(["-q", "-n", "0", "-p", "no:cacheprovider", "--no-header", "-x",
                      f"--hypothesis-seed={sys.argv[2]}", sys.argv[3]]))
"""


def mutate(source: str, mutant: Mutant) -> str:
    """`source` with the mutant's line changed; raises if the line is not found exactly once (the
    ledger changed under the mutant, which must then be brought up to date)."""
    if source.count(mutant.original + "\n") != 1:
        raise SystemExit(f"mutant {mutant.name}: its line is not in credits.py exactly once: {mutant.original!r}")
    return source.replace(mutant.original + "\n", mutant.mutated + "\n")


def survives(ledger_path: Path, seed: int, timeout_seconds: float) -> bool:
    """Whether the state machine passes with the ledger at `ledger_path` for `seed`."""
    result = subprocess.run([sys.executable, "-c", CHILD, str(ledger_path), str(seed), STATE_MACHINE],
                            cwd=ROOT, capture_output=True, text=True, timeout=timeout_seconds,
                            env={**os.environ, "LAMARCKIAN_HPC_SECOND_PASS": "1"})  # it is a second-pass test
    if result.returncode not in (0, 1):  # 1: tests failed; anything else is an error of the harness
        raise SystemExit(f"the state machine did not run ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result.returncode == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5, help="Hypothesis seeds per mutant (0, 1, ...).")
    parser.add_argument("--only", nargs="*", default=None, help="Names of the mutants to run (default: all).")
    parser.add_argument("--report", type=Path, default=Path("ledger_mutants.json"), help="Where to write the JSON.")
    parser.add_argument("--timeout", type=float, default=300.0, help="Seconds one run of the state machine may take.")
    args = parser.parse_args()
    mutants = [m for m in MUTANTS if args.only is None or m.name in args.only]
    seeds = list(range(args.seeds))
    source = LEDGER.read_text()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for seed in seeds:
            if not survives(LEDGER, seed, args.timeout):
                raise SystemExit(f"the unmutated ledger fails the state machine with seed {seed}: fix that first")
        for mutant in mutants:
            path = Path(folder) / f"{mutant.name}.py"
            path.write_text(mutate(source, mutant))
            started = time.monotonic()
            killed_by = [seed for seed in seeds if not survives(path, seed, args.timeout)]
            rows.append({**asdict(mutant), "seeds_run": len(seeds), "seeds_killing": len(killed_by),
                         "killed": len(killed_by) == len(seeds), "seconds": round(time.monotonic() - started, 1)})
            print(f"{mutant.name}: killed by {len(killed_by)} of {len(seeds)} seeds", file=sys.stderr, flush=True)
    print("| mutant | what it breaks | seeds killing / run | killed |\n|---|---|---:|---|")
    for row in rows:
        print(f"| {row['name']} | {row['what']} | {row['seeds_killing']} / {row['seeds_run']} | "
              f"{'yes' if row['killed'] else 'NO'} |")
    killed = sum(row["killed"] for row in rows)
    print(f"\n{killed} of {len(rows)} mutants killed by every seed of the state machine alone.")
    args.report.write_text(json.dumps({"test": STATE_MACHINE, "seeds": seeds, "killed": killed, "run": len(rows),
                                       "mutants": rows}, indent=2) + "\n")
    sys.exit(0 if killed == len(rows) else 1)


if __name__ == "__main__":
    main()
