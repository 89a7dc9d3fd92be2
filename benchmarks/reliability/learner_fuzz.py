"""Messages that pass the wire layer but are wrong, thrown at a real learner: none may stop it.

A process of its own, holding an actor's keys of the job (so that only the learner's own checks
stand in the way), sends the experience receiver of a learner rank (`learner.ranks.ShardLearner`,
the intake every learner process runs) mutations of valid actor messages, made by a seeded
generator: meta fields of the wrong type, missing or unknown, huge or negative integers, NaN and
infinity, strings too long, arrays of the wrong dtype, 0-d arrays, a row more or less, a wrong
observation shape, actions outside the space, unknown arrays, a policy the learner does not train,
gradients to a learner that takes experience. A valid hello from each actor comes first and a
valid experience message every VALID_EVERY messages and at the end. The learner must count every
bad message in `malformed_messages` (exactly), accept every valid one and train on them.

    python benchmarks/reliability/learner_fuzz.py [--messages 10000] [--seed 0]

Prints a Markdown table and writes benchmarks/results/learner_fuzz.json. tests/test_learner_fuzz.py
runs the same with fewer messages.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import common

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "learner_fuzz.json"
CARTPOLE = ROOT / "configs" / "ppo_cartpole.yaml"
ACTORS = 2
#: One valid experience message after this many bad ones (and one at the end).
VALID_EVERY = 50
STEPS = 12  # of a valid message, in fragments of 5 and 7
INT_FIELDS = {"actor_index", "pid", "env_frames", "env_errors", "sequence"}
#: Values no integer field of a message may hold: every field's bounds are within [-1, 2 ** 40)
#: (actor_index's, [0, ACTORS)).
BAD_INTS = ["7", None, 1.5, float("inf"), float("-inf"), float("nan"), True, -7, (1 << 63) - 1, -(1 << 63),
            (1 << 64) - 1, [], {}]
BAD_TEXTS = [7, None, "", "x" * 5000, [], b"host", True, 2.5]
#: The numpy kinds each experience array may have in this run (CartPole: float observations,
#: discrete actions); any other is wrong.
KINDS = {"observations": "f", "bootstrap_observations": "f", "actions": "i", "log_probs": "f", "rewards": "f",
         "policy_versions": "i", "lengths": "i", "terminated": "b", "episode_returns": "f", "episode_lengths": "i",
         "recorded_index": "i", "recorded_lengths": "i", "recorded_terminated": "b", "recorded_observations": "f",
         "recorded_actions": "i", "recorded_rewards": "f", "recorded_policy_versions": "i"}
DTYPES = ["bool", "int8", "uint8", "int32", "int64", "uint64", "float16", "float32", "float64"]
#: Values out of each integer array's bounds: discrete actions of two choices, lengths >= 1,
#: versions and counts >= 0, recorded episodes among the message's.
OUT_OF_RANGE = {"actions": [2, -1, 1 << 40], "recorded_actions": [2, -1], "lengths": [0, -3],
                "recorded_lengths": [0, -1], "policy_versions": [-1, 1 << 50], "recorded_policy_versions": [-1],
                "episode_lengths": [-1, 1 << 41], "recorded_index": [-1, 3]}


def valid_experience(actor_index: int, sequence: int, recorded: bool = False) -> Any:
    """An experience message of this run's shape (CartPole rows), recorded episode optional."""
    from lamarckian_hpc.mdp import ExperienceBatch, RecordedSteps
    from lamarckian_hpc.runtime.messages import experience_message

    rng = np.random.default_rng(sequence)
    batch = ExperienceBatch(observations=rng.normal(size=(STEPS, 4)).astype(np.float32),
                            actions=rng.integers(0, 2, STEPS), log_probs=np.full(STEPS, -0.69, np.float32),
                            rewards=np.ones(STEPS, np.float32), policy_versions=np.zeros(STEPS, np.int64),
                            lengths=np.array([5, 7]), terminated=np.array([True, False]),
                            bootstrap_observations=rng.normal(size=(2, 4)).astype(np.float32))
    episodes = ()
    if recorded:
        steps = RecordedSteps("agent_0", batch.observations[:5], batch.actions[:5], batch.rewards[:5],
                              batch.policy_versions[:5], True)
        episodes = ((1, steps),)
    return experience_message(actor_index, batch, np.array([9.0, 5.0]), np.array([9, 5]), STEPS,
                              sequence=sequence, recorded=episodes)


def bad_messages(rng: np.random.Generator) -> Iterator[tuple[str, Any]]:
    """(what was done, message) for ever: each a valid message with one thing made wrong."""
    from dataclasses import replace

    from lamarckian_hpc.comm import Message
    from lamarckian_hpc.runtime.messages import env_failing_message, gradients_message, hello_message

    def pick(values: list[Any]) -> Any:
        return values[int(rng.integers(len(values)))]

    while True:
        base = pick(["hello", "env_failing", "experience", "experience", "experience", "recorded", "gradients"])
        if base == "hello":
            message = hello_message(int(rng.integers(ACTORS)), 4242, "node-1")
        elif base == "env_failing":
            message = env_failing_message(int(rng.integers(ACTORS)), "RuntimeError: boom")
        elif base == "gradients":  # this learner takes experience: any gradients are wrong
            message = gradients_message(0, 0, [rng.normal(size=(4, 4)).astype(np.float32)], 12, np.zeros(0),
                                        np.zeros(0, np.int64), 12, {"loss_policy": 0.1})
            yield "gradients", replace(message, sender=pick(["actor-0", "actor-1", "x" * 300]))
            continue
        else:
            message = valid_experience(int(rng.integers(ACTORS)), int(rng.integers(100)), base == "recorded")
        meta, arrays = dict(message.meta), dict(message.arrays)
        required = {"hello": ["actor_index", "pid", "host"], "env_failing": ["actor_index", "error"]}.get(
            base, ["actor_index", "env_frames"])  # the fields without a default
        choices = ["meta_value", "meta_missing", "meta_unknown", "array_unknown"]
        if base not in ("hello", "env_failing"):
            choices += ["array_missing", "dtype", "zero_d", "length", "non_finite", "observation_shape",
                        "out_of_range", "policy"]
        what = pick(choices)
        if what == "meta_value":
            name = pick(sorted(meta))
            if name in INT_FIELDS:
                meta[name] = pick(BAD_INTS + ([ACTORS] if name == "actor_index" else []))
            elif name == "recorded_agent_ids":
                meta[name] = pick([7, None, ["agent_0", "agent_1"], [7], ["x" * 100]])
            else:
                meta[name] = pick(BAD_TEXTS)
            what = f"meta_value:{name}"
        elif what == "meta_missing":
            name = pick(required)
            del meta[name]
            what = f"meta_missing:{name}"
        elif what == "meta_unknown":
            meta[pick(["extra", "credits", "Actor_index", "x" * 40, b"extra"])] = pick([1, "y", None, [1, 2]])
        elif what == "array_unknown":
            arrays[pick(["extra", "gradient_0", "observation", "recorded_x"])] = np.zeros(3, np.float32)
        elif what == "array_missing":
            name = pick(sorted(arrays))
            del arrays[name]
            what = f"array_missing:{name}"
        elif what == "policy":
            meta["policy_id"] = pick(["other", "main ", "MAIN", "frozen"])
        else:
            name = pick(sorted(arrays))
            array = arrays[name]
            if what == "dtype":
                arrays[name] = array.astype(pick([d for d in DTYPES if np.dtype(d).kind not in KINDS[name]]))
            elif what == "zero_d":
                arrays[name] = np.asarray(array.flat[0] if array.size else 0, array.dtype)
            elif what == "length":
                arrays[name] = array[1:] if rng.random() < 0.5 else np.concatenate([array, array[:1]])  # none is empty
            elif what == "non_finite" or (what == "out_of_range" and name not in OUT_OF_RANGE):
                name = pick([n for n, a in arrays.items() if a.dtype.kind == "f" and a.size])
                damaged = arrays[name].copy()
                damaged.flat[int(rng.integers(damaged.size))] = pick([np.nan, np.inf, -np.inf])
                arrays[name], what = damaged, "non_finite"
            elif what == "out_of_range":
                damaged = array.copy()
                damaged.flat[int(rng.integers(damaged.size))] = pick(OUT_OF_RANGE[name])
                arrays[name] = damaged
            elif what == "observation_shape":
                name = pick([n for n in arrays if n.endswith("observations")])
                rows = arrays[name]
                arrays[name] = pick([rows[:, :3], rows.reshape(len(rows), 2, 2), rows[:, :, None], rows[:, 0]])
            what = f"{what}:{name}"
        sender = pick([message.sender, "actor-1", "relay-x" * 40])
        yield what, Message(message.kind, sender, message.policy_version, arrays, meta)


def expected_valid(messages: int) -> int:
    """Valid experience messages sent among `messages` bad ones (the hellos aside)."""
    return messages // VALID_EVERY + 1


def send(address: str, key_folder: str, messages: int, seed: int) -> None:
    """The hostile process: the actors' hellos, then `messages` bad messages with a valid one every
    VALID_EVERY, and a valid one last; prints what it sent (one JSON line) and waits for its stdin
    to close before it closes its socket (which drops whatever is still queued)."""
    import zmq

    from lamarckian_hpc.comm import BROADCAST, ExperienceSender, JobKeys
    from lamarckian_hpc.runtime.messages import hello_message

    context = zmq.Context()
    sender = ExperienceSender(context, address, keys=JobKeys.load(key_folder), trust=BROADCAST)
    for index in range(ACTORS):
        sender.send(hello_message(index, 1000 + index, "node-0"))
    generated, sequence, done = Counter(), 0, Counter()
    for number, (what, message) in enumerate(bad_messages(np.random.default_rng(seed)), start=1):
        if number > messages:
            break
        sender.send(message)
        done[what.split(":")[0]] += 1
        generated[what] += 1
        if number % VALID_EVERY == 0:
            sender.send(valid_experience(0, sequence))
            sequence += 1
    sender.send(valid_experience(0, sequence))
    print(json.dumps({"bad": sum(done.values()), "valid": sequence + 1, "mutations": dict(sorted(done.items())),
                      "distinct_mutations": len(generated)}), flush=True)
    sys.stdin.read()
    sender.close()
    context.term()


def run(messages: int, seed: int = 0, timeout_seconds: float = 300.0) -> dict[str, Any]:
    """A learner rank's intake here, the hostile sender in a process of its own; what happened."""
    import zmq

    from lamarckian_hpc.comm import JobKeys, stop_authenticator
    from lamarckian_hpc.config import load_config
    from lamarckian_hpc.runtime.algorithms import make_learner
    from lamarckian_hpc.runtime.learner.ranks import ShardLearner
    from lamarckian_hpc.runtime.run_shape import spaces_of

    config = load_config(CARTPOLE, ["runtime.device=cpu", "runtime.torch_threads=1"])
    spaces = spaces_of(config)
    context = zmq.Context()
    folder = tempfile.mkdtemp(prefix="learner-fuzz-keys-")
    keys = JobKeys.create(folder, relays=True)
    shard = ShardLearner(config, context, "127.0.0.1", JobKeys.load(keys.relay_folder), range(ACTORS), 1 << 20,
                         spaces)
    shard.learner = make_learner(config, *spaces)
    total = ACTORS + messages + expected_valid(messages)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    started = time.monotonic()
    hostile = subprocess.Popen([sys.executable, __file__, "--send", shard.receiver.address, "--key-folder",
                                str(keys.actor_folder), "--messages", str(messages), "--seed", str(seed)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    accepted, error, metrics = 0, None, {}
    try:
        deadline = started + timeout_seconds
        while shard.receiver.received < total and time.monotonic() < deadline:
            item = shard._next_experience()
            if item is not None and shard._accept(item, shard.learner.version):
                accepted += 1
                shard.pending.append(item.batch)
                shard.pending_steps += len(item.batch)
        seconds = time.monotonic() - started
        metrics = shard.learner.update(shard.take(spaces), STEPS * accepted)  # the accepted steps train
    except Exception as failure:  # noqa: BLE001 - what the learner died of is the result
        seconds, error = time.monotonic() - started, f"{type(failure).__name__}: {failure}"
    finally:
        sent, _ = hostile.communicate(timeout=60)
        shard.receiver.close()
        stop_authenticator(context)
        context.destroy(linger=0)
    summary = json.loads(sent.splitlines()[-1]) if sent.strip() else {"bad": -1, "valid": -1, "mutations": {}}
    return {"messages": messages, "seed": seed, "sent_bad": summary["bad"], "sent_valid": summary["valid"],
            "hellos": dict(shard.hellos), "malformed_messages": shard.receiver.malformed, "accepted": accepted,
            "received": shard.receiver.received, "learner_alive": error is None, "error": error,
            "update_finite": bool(metrics) and all(np.isfinite(value) for value in metrics.values()),
            "seconds": round(seconds, 2), "mutations": summary["mutations"],
            "distinct_mutations": summary.get("distinct_mutations", 0)}


def table(result: dict[str, Any]) -> str:
    return "\n".join([
        "| bad messages sent | counted malformed | valid sent | accepted | learner alive | seconds |",
        "|---:|---:|---:|---:|---|---:|",
        f"| {result['sent_bad']:,} | {result['malformed_messages']:,} | {result['sent_valid']:,} | "
        f"{result['accepted']:,} | {'yes' if result['learner_alive'] else 'no: ' + str(result['error'])} | "
        f"{result['seconds']} |"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000, help="bad messages to send")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--send", metavar="ADDRESS", help=argparse.SUPPRESS)  # the hostile process
    parser.add_argument("--key-folder", help=argparse.SUPPRESS)
    common.add_common_args(parser)
    args = parser.parse_args()
    if args.send:
        send(args.send, args.key_folder, args.messages, args.seed)
        return
    result = run(args.messages, args.seed)
    print(table(result))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    common.write_results(args.output, {
        "result": result}, args.label)


if __name__ == "__main__":
    main()
