"""Fault injection: what was injected, whether the run survived, and what data was lost.

    python benchmarks/reliability/faults.py                      # all faults, short runs (a few minutes here)
    python benchmarks/reliability/faults.py --actor-kill-seconds 180 --only actor_kill
    python benchmarks/reliability/faults.py --only node_loss node_loss_continue   # on the Slurm test cluster
    python benchmarks/reliability/faults.py --only fuzz --fuzz-scale 50           # a longer fuzz run

Each fault is injected for real: SIGKILL of processes (actors, a relay, the learner, a writer
creating its file or in the middle of flushing), an environment that raises, when a Slurm test
cluster is running a killed slurmd, and the fuzz suite of CI at a multiple of its examples
(hostile messages, configs, damaged run files, raw TCP junk at live sockets). Prints one table
with what was tried in all (messages, configs, kills) and writes benchmarks/results/faults.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks import common
from benchmarks.reliability.node_loss import node_loss_continue, node_loss_fail
from lamarckian_hpc.config import load_config
from lamarckian_hpc.storage import open_run

ROOT = Path(__file__).resolve().parents[2]

CARTPOLE = ROOT / "configs" / "ppo_cartpole.yaml"
RESULTS = ROOT / "benchmarks" / "results" / "faults.json"


def actor_kills(seconds: float, interval: float, num_actors: int) -> dict:
    """SIGKILL a random actor every `interval` s of a `seconds`-long async PPO run; how long until
    the sampled throughput is back to 90% of its level before the kill."""
    from lamarckian_hpc.runtime.runners.distributed import DistributedTrainer

    config = load_config(CARTPOLE, ["runtime.mode=ray", f"runtime.num_actors={num_actors}", "stop.target_return=null",
                                    "stop.total_env_steps=100000000", f"stop.max_wall_seconds={seconds}"])
    timeline: list[tuple[float, int]] = []
    kills: list[float] = []
    rng = random.Random(0)

    class Killer:
        def on_update_end(self, report) -> None:
            timeline.append((report.wall_time, report.env_frames))
            due = interval * (len(kills) + 1)
            if report.wall_time >= due and report.wall_time < seconds - interval / 2 and trainer.actor_pids:
                pid = trainer.actor_pids[rng.choice(sorted(trainer.actor_pids))]
                try:
                    os.kill(pid, signal.SIGKILL)
                    kills.append(report.wall_time)
                except ProcessLookupError:
                    pass

        def on_train_end(self, result) -> None:
            pass

    trainer = DistributedTrainer(config, [Killer()])
    try:
        result = trainer.train()
        restarts = trainer.actor_restarts
    finally:
        trainer.close()
    times, frames = np.array([t for t, _ in timeline]), np.array([f for _, f in timeline])

    def rate(start: float, end: float) -> float:
        inside = (times >= start) & (times <= end)
        if inside.sum() < 2:
            return float("nan")
        return float((frames[inside][-1] - frames[inside][0]) / (times[inside][-1] - times[inside][0]))

    recoveries = []
    for kill in kills:
        before = rate(kill - 5, kill)
        recovered = next((t - kill for t in times[times > kill] if rate(t - 2, t) >= 0.9 * before), float("inf"))
        recoveries.append(recovered)
    return {"fault": f"SIGKILL a random actor every {interval:g} s ({num_actors} actors, {seconds:g} s run)",
            "injected": len(kills), "survived": result.env_frames > 0,  # the run reached its end
            "data_lost": "the killed actors' unsent rollouts (at most one message each)",
            "detail": {"actor_restarts": restarts, "env_frames": result.env_frames,
                       "recovery_seconds": [round(r, 2) for r in recoveries],
                       "recovered_within_5s": int(sum(r <= 5 for r in recoveries))}}


def relay_kill() -> dict:
    """SIGKILL a relay of a six-node tree; how long until its child receives weights again."""
    import zmq

    from lamarckian_hpc.comm import WeightPublisher, WeightSubscriber
    from lamarckian_hpc.comm.relay import RelaySpec, spawn_relay
    from lamarckian_hpc.comm.topology import build_tree

    nodes = [f"node{i}" for i in range(6)]
    tree = build_tree(nodes)
    folder = tempfile.mkdtemp()
    context = zmq.Context()
    learner = WeightPublisher(context)
    addresses, processes = {"node0": learner.address}, {}
    for node in tree.nodes[1:]:
        spec = RelaySpec(node, tree.to_dict(), dict(addresses), ipc_path=f"{folder}/{node}.ipc", heartbeat_ms=200,
                         timeout_ms=1000)
        processes[node], addresses[node] = spawn_relay(spec)
    victim = tree.parent_of(tree.nodes[-1])
    child = WeightSubscriber(context, f"ipc://{folder}/{tree.nodes[-1]}.ipc")
    weights = {"w": np.zeros(1 << 20, np.float32)}
    try:
        version = 0
        while child.poll(0) is None:
            version += 1
            learner.publish(version, weights)
            learner.serve_joins()
            time.sleep(0.05)
        processes[victim].kill()
        killed_at, killed_version = time.monotonic(), version
        reattached = None
        while time.monotonic() - killed_at < 30:
            version += 1
            learner.publish(version, weights)
            learner.serve_joins()
            message = child.poll(50)
            if message is not None and message.policy_version > killed_version:
                reattached = time.monotonic() - killed_at
                break
    finally:
        for process in processes.values():
            process.kill()
        child.close()
        learner.close()
        context.destroy(linger=0)
    return {"fault": f"SIGKILL the relay of {victim} (a node with a child) in a 6-node tree", "injected": 1,
            "survived": reattached is not None, "data_lost": "versions published while re-attaching (newer ones follow)",
            "detail": {"reattached_after_seconds": None if reattached is None else round(reattached, 2)}}


def _train_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "lamarckian_hpc", "train", *args]


def learner_kill_and_resume(folder: Path) -> dict:
    """SIGKILL the learner (a serial run) mid-run, then `train --resume`."""
    run = folder / "runs" / "learner.h5"
    process = subprocess.Popen(_train_command(str(CARTPOLE), "runtime.mode=serial", "stop.target_return=null",
                                              "stop.total_env_steps=10000000", "storage.run_name=learner",
                                              "storage.checkpoint_interval_seconds=2",
                                              "storage.metrics_interval_seconds=0.5"),
                               cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    from lamarckian_hpc.runtime.learner.checkpoint import load_checkpoint

    checkpoint = run.with_suffix(".ckpt")
    while not (checkpoint.exists() and load_checkpoint(checkpoint).policy_version >= 5):
        time.sleep(0.2)
    time.sleep(3.3)  # more updates after the checkpoint: the resumed run must drop and redo them
    process.send_signal(signal.SIGKILL)
    process.wait()
    with open_run(run) as reader:
        before = reader.metric("learning_rate").policy_version
    budget = load_checkpoint(checkpoint).env_frames + 20_000
    resumed = subprocess.run(_train_command("--resume", str(run), f"stop.total_env_steps={budget}"),
                             cwd=folder, capture_output=True, text=True)
    with open_run(run) as reader:
        after = reader.metric("learning_rate").policy_version
        resumed_through = int(reader.meta.get("resumed_through_version", -1))
    duplicated = int(after.size - np.unique(after).size)
    missing = int(np.setdiff1d(np.arange(1, after.max() + 1), after).size)
    return {"fault": "SIGKILL the learner mid-run, then lamarckian-hpc train --resume", "injected": 1,
            "survived": resumed.returncode == 0 and duplicated == 0 and missing == 0,
            "data_lost": f"{int(before.max()) - resumed_through} updates after the last checkpoint (redone)",
            "detail": {"rows_before_kill": int(before.size), "resumed_through_version": resumed_through,
                       "rows_after_resume": int(after.size), "duplicated_rows": duplicated, "missing_versions": missing}}


WRITER = """
import sys, time, numpy as np
from lamarckian_hpc.storage import RunWriter
print("creating", flush=True)
writer = RunWriter(sys.argv[1], {}, [f"m{i}" for i in range(64)])
step = 0
while True:
    step += 1
    writer.append_many({f"m{i}": float(step) for i in range(64)}, env_frames=step, policy_version=step)
    if step % 50 == 0:
        writer.flush()
        print(step, flush=True)
"""


def writer_kills(folder: Path, count: int) -> dict:
    """SIGKILL a writer at random moments, from its start (while it creates its file) through a
    flush-heavy loop: is a file under the run's name always readable, how many rows beyond the last
    completed flush were lost, and can the next run of that name always start?"""
    from lamarckian_hpc.storage import RunWriter

    rng = random.Random(1)
    readable, no_file, reused, worst_lost = 0, 0, 0, 0
    for index in range(count):
        path = folder / f"writer{index}.h5"
        process = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True)
        flushed = 0
        assert process.stdout is not None and process.stdout.readline().strip() == "creating"
        # Every other kill lands while the file is created (that takes a few ms), the rest while it is flushed.
        deadline = time.monotonic() + (rng.uniform(0.0, 0.02) if index % 2 == 0 else rng.uniform(0.05, 1.5))
        while time.monotonic() < deadline and process.poll() is None:
            ready, _, _ = select.select([process.stdout], [], [], max(0.0, deadline - time.monotonic()))
            if ready and (line := process.stdout.readline()).strip():
                flushed = int(line)
        process.kill()
        process.wait()
        if not path.exists():
            no_file += 1  # killed before the file was complete: nothing under its name
        else:
            try:
                with open_run(path) as reader:
                    rows = min(len(reader.metric(f"m{i}")) for i in range(64))
                readable += 1
                worst_lost = max(worst_lost, flushed - rows)
            except Exception:  # noqa: BLE001 - the point is to count unreadable files
                pass
        try:
            RunWriter(path, {}, ["m0"], overwrite=path.exists()).close()
            reused += 1
        except Exception:  # noqa: BLE001 - counted: the name could not be used again
            pass
    return {"fault": f"SIGKILL a writer {count} times at random moments, creating its file or flushing every 50 rows",
            "injected": count, "survived": readable + no_file == count and reused == count,
            "data_lost": "rows buffered since the last flush (at most one interval)",
            "detail": {"readable_files": readable, "killed_before_the_file_was_complete": no_file,
                       "next_run_of_the_name_started": reused,
                       "rows_lost_beyond_last_reported_flush": max(0, worst_lost)}}


FUZZ_TESTS = {"messages": "tests/test_wire_fuzz.py", "configs": "tests/test_config_fuzz.py",
              "damaged_run_files": "tests/test_run_file_damage.py", "live_sockets": "tests/test_socket_fuzz.py"}


def fuzz(scale: int) -> dict:
    """The fuzz suite of CI with `scale` times its examples: generated messages at the decoder,
    configs at the loader, damaged files at the reader, and hostile peers at live sockets. Counts
    what each tried, from Hypothesis' statistics and the socket test's recorded properties."""
    import xml.etree.ElementTree as ElementTree

    report = Path(tempfile.mkdtemp()) / "fuzz.xml"
    started = time.monotonic()
    completed = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                "--hypothesis-show-statistics", f"--junitxml={report}", *FUZZ_TESTS.values()],
                               cwd=ROOT, capture_output=True, text=True,
                               env=dict(os.environ, LAMARCKIAN_HPC_FUZZ_SCALE=str(scale)))
    tried = dict.fromkeys(FUZZ_TESTS, 0)
    current = None
    for line in completed.stdout.splitlines():
        if line.strip().endswith(":") and "::" in line:
            current = next((name for name, file in FUZZ_TESTS.items() if line.strip().startswith(file)), None)
        elif current is not None and (found := re.search(r"(\d+) passing examples, (\d+) failing examples, "
                                                          r"(\d+) invalid examples", line)):
            tried[current] += int(found[1]) + int(found[2])
    suite = ElementTree.parse(report).getroot().find("testsuite")
    counted = ("valid_messages", "hostile_messages", "tcp_junk_connections")  # Hypothesis adds properties of its own
    properties = {prop.get("name"): int(prop.get("value")) for prop in suite.iter("property")
                  if prop.get("name") in counted} if suite is not None else {}
    tried["live_sockets"] = properties.get("hostile_messages", 0) + properties.get("tcp_junk_connections", 0)
    failures = int(suite.get("failures", 0)) + int(suite.get("errors", 0)) if suite is not None else -1
    failed = [f"{case.get('name')}: {(problem.get('message') or '').splitlines()[0][:200]}"
              for case in (suite.iter("testcase") if suite is not None else ())
              for problem in [*case.findall("failure"), *case.findall("error")]]
    summary = completed.stdout.strip().splitlines()[-1] if completed.stdout.strip() else completed.stderr[-300:]
    return {"fault": f"fuzz suite at {scale}x CI's examples: decoder, config loader, run-file reader, live sockets",
            "injected": sum(tried.values()), "survived": completed.returncode == 0 and failures == 0,
            "data_lost": "none (every valid message delivered, every bad input one clear error)",
            "detail": {**{f"{name}_tried": count for name, count in tried.items()}, **properties,
                       "pytest": summary, "seconds": round(time.monotonic() - started, 1),
                       **({"failed": failed} if failed else {})}}


def raising_env(steps: int) -> dict:
    from lamarckian_hpc.mdp.fault_injection import FAULTY_ENV_ID
    from lamarckian_hpc.runtime.runners.trainer import SerialTrainer

    config = load_config(CARTPOLE, ["runtime.mode=serial", f"env.id={FAULTY_ENV_ID}",
                                    "env.kwargs={env_id: CartPole-v1, error_rate: 0.01}",
                                    f"stop.total_env_steps={steps}", "stop.target_return=null"])
    reports = []

    class Log:
        def on_update_end(self, report) -> None:
            reports.append(report)

        def on_train_end(self, result) -> None:
            pass

    trainer = SerialTrainer(config, [Log()])
    try:
        result = trainer.train()
    finally:
        trainer.close()
    errors = int(reports[-1].metrics["env_errors"])
    return {"fault": "an environment that raises at 1% of steps (CartPole, serial PPO)", "injected": errors,
            "survived": result.env_frames >= steps, "data_lost": f"the {errors} failed episodes' steps",
            "detail": {"env_frames": result.env_frames, "recent_return_mean": result.recent_return_mean}}


FAULTS = {"fuzz", "actor_kill", "relay_kill", "learner_kill", "writer_kill", "raising_env", "node_loss",
          "node_loss_continue"}


KILLS = ("actor_kill", "relay_kill", "learner_kill", "writer_kill", "node_loss", "node_loss_continue")


def fault_totals(rows: list[dict]) -> dict[str, int]:
    """What the rows tried in all: generated inputs by kind, and processes killed."""
    fuzzed = next((row["detail"] for row in rows if row["name"] == "fuzz"), {})
    return {"messages_tried": fuzzed.get("messages_tried", 0) + fuzzed.get("hostile_messages", 0),
            "tcp_junk_connections": fuzzed.get("tcp_junk_connections", 0),
            "configs_tried": fuzzed.get("configs_tried", 0),
            "damaged_run_files_tried": fuzzed.get("damaged_run_files_tried", 0),
            "kills_tried": sum(row["injected"] for row in rows if row["name"] in KILLS)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=sorted(FAULTS), default=None,
                        help="faults to inject (default all; node_loss only where the Slurm test cluster answers)")
    parser.add_argument("--actor-kill-seconds", type=float, default=60.0)
    parser.add_argument("--actor-kill-interval", type=float, default=10.0)
    parser.add_argument("--num-actors", type=int, default=4)
    parser.add_argument("--writer-kills", type=int, default=20)
    parser.add_argument("--env-steps", type=int, default=60_000)
    parser.add_argument("--fuzz-scale", type=int, default=10, help="multiple of CI's fuzz examples (default 10)")
    common.add_common_args(parser)
    args = parser.parse_args()
    if args.only is None:
        from lamarckian_hpc.cluster.scheduler import cluster_problem

        args.only = sorted(FAULTS)
        if (problem := cluster_problem(4)) is not None:
            print(f"not injecting node_loss, node_loss_continue: {problem}", flush=True)
            args.only = [name for name in args.only if not name.startswith("node_loss")]
    rows = []
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        runs = {"actor_kill": lambda: actor_kills(args.actor_kill_seconds, args.actor_kill_interval, args.num_actors),
                "relay_kill": relay_kill, "learner_kill": lambda: learner_kill_and_resume(folder),
                "writer_kill": lambda: writer_kills(folder, args.writer_kills),
                "raising_env": lambda: raising_env(args.env_steps), "fuzz": lambda: fuzz(args.fuzz_scale),
                "node_loss": lambda: node_loss_fail(folder), "node_loss_continue": lambda: node_loss_continue(folder)}
        for name in sorted(args.only):
            print(f"injecting: {name} ...", flush=True)
            rows.append({"name": name, **runs[name]()})
    print(f"\n{'fault':<78} {'injected':>8} {'survived':>8}  data lost")
    for row in rows:
        print(f"{row['fault']:<78} {row['injected']:>8} {str(row['survived']):>8}  {row['data_lost']}")
        print(f"{'':<78} {json.dumps(row['detail'])}")
    totals = fault_totals(rows)
    print("\ntried: " + ", ".join(f"{count:,} {name.replace('_', ' ')}" for name, count in totals.items() if count)
          + ("; nothing lost beyond the stated data, nothing crashed" if all(row["survived"] for row in rows)
             else "; SOME FAULTS WERE NOT SURVIVED (see above)"))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    earlier = (common.read_results(RESULTS, args.label) or {}).get("faults", [])
    merged = {row["name"]: row for row in [*earlier, *rows]}  # a partial run replaces only its own rows
    merged_rows = sorted(merged.values(), key=lambda row: row["name"])
    common.write_results(RESULTS, {"faults": merged_rows, "tried": fault_totals(merged_rows)}, args.label)
    print(f"\nwrote {RESULTS}")


if __name__ == "__main__":
    main()
