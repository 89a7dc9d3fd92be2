"""Flow control when the learner pauses: the credits really in flight, against the budget, while a
few actors sample and a learner alternates between receiving and long updates.

Real ZeroMQ sockets, the run's own ExperienceSender and ExperienceReceiver, one thread per actor;
the clock is scaled down so that a pause outlasts both the time after which an actor without a
credit asks again (ASK_AGAIN_SECONDS, 30 s in a run) and the time after which a silent sender's
credits are reclaimed (120 s in a run), as a 150 s stop of a learner does. The credits in flight
are counted from outside, as what the ledger cannot see: credits the actors hold plus credited
messages sent and not yet taken by the learner (grants still on their way are left out, so this
is a lower bound of the truth). Run it with the code to compare on PYTHONPATH:

    python benchmarks/scale/credit_pauses.py [--actors 4] [--cycles 4] [--label after]

Prints a table and adds its row to benchmarks/results/credit_pauses.json (one row per label).
"""

from __future__ import annotations

import argparse
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import zmq

import lamarckian_hpc.comm.channels as channels
import lamarckian_hpc.comm.credits as credits
from benchmarks import common
from lamarckian_hpc.comm import ExperienceReceiver, ExperienceSender, Message

RESULTS = Path(__file__).resolve().parents[1] / "results" / "credit_pauses.json"
#: Seconds of the scaled clock: ask again after 1 s dry, reclaim after 3 s silent, pause 4 s.
ASK_AGAIN, RECLAIM, RECEIVE, PAUSE = 1.0, 3.0, 2.0, 4.0


def _actor(context: zmq.Context, address: str, window: int, stop: threading.Event, sent: list[int],
           held: list[int], index: int) -> None:
    sender = ExperienceSender(context, address, window=window)
    payload = Message("experience", f"actor-{index}", 1, {"x": np.zeros(64, np.float32)})
    try:
        while not stop.is_set():
            if sender.take_credit(20):
                time.sleep(0.005)  # sampling a rollout
                if sender.send(payload, timeout_ms=1000, credited=True):
                    sent[index] += 1
            held[index] = sender.credits
    finally:
        sender.close()


def measure(actors: int, cycles: int, budget: int) -> dict[str, Any]:
    channels.ASK_AGAIN_SECONDS = ASK_AGAIN
    for name in ("PAUSE_SECONDS", "GRANT_TRANSIT_SECONDS"):  # scaled as the rest: 5 s each in a run (where defined)
        if hasattr(credits, name):
            setattr(credits, name, 0.5)
    context = zmq.Context()
    receiver = ExperienceReceiver(context, {"experience"}, credit_budget=budget)
    receiver.ledger.reclaim_seconds = RECLAIM
    window = max(1, -(-budget // actors))
    stop = threading.Event()
    sent, held = [0] * actors, [0] * actors
    threads = [threading.Thread(target=_actor, args=(context, receiver.address, window, stop, sent, held, i),
                                daemon=True) for i in range(actors)]
    for thread in threads:
        thread.start()
    received = 0
    in_flight: list[int] = []
    starved_cycles = 0
    try:
        for _ in range(cycles):
            deadline, got = time.monotonic() + RECEIVE, 0
            while time.monotonic() < deadline:
                if receiver.receive(10) is not None:
                    received += 1
                    got += 1
                in_flight.append(sum(held) + sum(sent) - received)
            starved_cycles += got == 0
            until = time.monotonic() + PAUSE  # an update: nothing is received
            while time.monotonic() < until:
                time.sleep(0.01)
                in_flight.append(sum(held) + sum(sent) - received)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=5)
        receiver.close()
        context.destroy(linger=0)
    ledger = receiver.ledger
    return {"actors": actors, "budget": budget, "window": window, "cycles": cycles, "received": received,
            "in_flight_max": max(in_flight), "in_flight_max_over_budget": max(in_flight) / budget,
            "written_off": ledger.written_off, "late": ledger.late,
            "reclaimed": ledger.reclaimed, "uncredited": ledger.uncredited, "starved_cycles": starved_cycles}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actors", type=int, default=4)
    parser.add_argument("--cycles", type=int, default=4)
    parser.add_argument("--budget", type=int, default=8)
    parser.add_argument("--label", default="after", help="the row's name, e.g. before or after")
    args = parser.parse_args(argv)
    row = {"label": args.label, **measure(args.actors, args.cycles, args.budget)}
    row["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                   cwd=Path(channels.__file__).parent).stdout.strip()
    data = common.read_results(RESULTS, provenance=False) or {"rows": []}  # --label names a row here, not an entry
    data["rows"] = [r for r in data["rows"] if r["label"] != args.label] + [row]
    data["clock"] = {"ask_again_seconds": ASK_AGAIN, "reclaim_seconds": RECLAIM, "receive_seconds": RECEIVE,
                     "pause_seconds": PAUSE}
    common.write_results(RESULTS, data)
    columns = ["label", "commit", "actors", "budget", "received", "in_flight_max", "in_flight_max_over_budget",
               "written_off", "late", "reclaimed", "uncredited", "starved_cycles"]
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for r in data["rows"]:
        print("| " + " | ".join(f"{r[c]:.2f}" if isinstance(r[c], float) else str(r[c]) for c in columns) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
