"""Actor messages that are well formed on the wire but wrong, at a learner's intake over real
sockets: each is dropped and counted in `malformed_messages` (the learner keeps serving and the next
valid message is trained on), logged once a minute per sender with the total, and the readers'
error names the field. Each case once killed the learner or reached `concatenate` or an update."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import zmq

from lamarckian_hpc.comm import ExperienceSender, Message, decode, encode
from lamarckian_hpc.config import load_config
from lamarckian_hpc.runtime.algorithms import make_learner

pytest.importorskip("ray")  # a learner rank's intake is built on Ray's process model
from benchmarks.reliability.learner_fuzz import valid_experience
from lamarckian_hpc.runtime.learner.ranks import ShardLearner  # noqa: E402
from lamarckian_hpc.runtime.messages import (
    KINDS,
    ActorExperience,
    ActorGradients,
    MalformedMessage,
    concatenate,
    gradients_message,
    hello_message,
    read_experience,
    read_gradients,
)
from lamarckian_hpc.runtime.run_shape import spaces_of

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.timeout(120)


def experience(number: int = 0, **meta: object) -> Message:
    """A valid CartPole experience message of actor 0 (benchmarks/reliability/learner_fuzz.py's), meta changed."""
    message = valid_experience(0, number)
    return replace(message, meta={**message.meta, **meta})


def with_array(message: Message, name: str, array: np.ndarray) -> Message:
    return replace(message, arrays={**message.arrays, name: array})


@pytest.fixture(scope="module")
def intake():
    """A learner rank's intake (two actors, CartPole) and a sender on real sockets."""
    config = load_config(ROOT / "configs" / "ppo_cartpole.yaml", ["runtime.device=cpu"])
    spaces = spaces_of(config)
    context = zmq.Context()
    shard = ShardLearner(config, context, "127.0.0.1", None, [0, 1], 1 << 20, spaces)
    shard.learner = make_learner(config, *spaces)
    sender = ExperienceSender(context, shard.receiver.address)
    yield shard, sender
    sender.close()
    shard.receiver.close()
    context.destroy(linger=0)


def deliver(intake, message: Message) -> ActorExperience | ActorGradients | None:
    """Send `message` and let the learner take it as it takes any: what it made of it (experience
    it accepted is kept to train on)."""
    shard, sender = intake
    before = shard.receiver.received
    sender.send(message)
    deadline, item = time.monotonic() + 20, None
    while shard.receiver.received == before:
        assert time.monotonic() < deadline, "the message never arrived"
        item = shard._next_message()
    if isinstance(item, ActorExperience) and shard._accept(item, shard.learner.version):
        shard.pending.append(item.batch)
    return item


BAD = {
    "hello with a non-numeric actor_index": (hello_message("three", 123, "node"), "actor_index"),  # type: ignore[arg-type]
    "hello with pid None": (hello_message(0, None, "node"), "pid"),  # type: ignore[arg-type]
    "hello with a host of a megabyte": (hello_message(0, 123, "h" * 1000), "host"),
    "env_frames infinite": (experience(env_frames=float("inf")), "env_frames"),
    "actor_index out of the run's": (experience(actor_index=2), "actor_index"),
    "0-d policy_versions": (with_array(experience(), "policy_versions", np.asarray(0)), "policy_versions"),
    "actions one short": (with_array(experience(), "actions", np.zeros(11, np.int64)), "actions"),
    "observations of the wrong shape": (with_array(experience(), "observations", np.zeros((12, 5), np.float32)),
                                        "observations"),
    "a discrete action outside the space": (with_array(experience(), "actions", np.full(12, 2)), "actions"),
    "NaN rewards": (with_array(experience(), "rewards", np.full(12, np.nan, np.float32)), "rewards"),
    "an unknown meta field": (experience(extra=1), "extra"),
    "unknown meta fields, one named in bytes": (replace(experience(), meta={**experience().meta, b"x": 1, "y": 2}),
                                                "unknown field b'x'"),
    "fragment lengths whose int64 sum wraps round": (
        with_array(with_array(experience(), "lengths", np.array([1 << 62] * 4 + [12])), "terminated", np.ones(5, bool)),
        "lengths"),
    "a policy this learner does not train": (experience(policy_id="frozen"), "policy_id"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_wrong_message_is_dropped_and_counted_and_the_next_valid_one_trained_on(intake, case, caplog):
    shard, _ = intake
    message, field = BAD[case]
    malformed = shard.receiver.malformed
    with caplog.at_level(logging.ERROR):
        assert deliver(intake, replace(message, sender=f"sender of {case}")) is None
    assert shard.receiver.malformed == malformed + 1
    line = next(record.getMessage() for record in caplog.records if f"sender of {case}" in record.getMessage())
    assert field in line and f"({malformed + 1} malformed messages in all)" in line, line
    item = deliver(intake, experience(7))
    assert isinstance(item, ActorExperience) and shard.pending[-1] is item.batch
    assert len(concatenate(shard.pending)) == 12 * len(shard.pending)  # every kept batch lines up with the others


def test_a_hello_sent_again_is_the_same_process_and_a_new_pid_a_restart(intake):
    """Actors send their hello again with each new ask for credit (`ExperienceSender.announce`):
    a repeat neither counts as a restart nor renumbers the process's messages."""
    shard, _ = intake
    deliver(intake, hello_message(0, 4242, "node-a"))
    hellos, lost = shard.hellos[0], shard.lost_messages
    shard._check_sequence(deliver(intake, experience(5)))
    assert shard.next_sequence[0] == 6
    deliver(intake, hello_message(0, 4242, "node-a"))
    assert shard.hellos[0] == hellos and shard.next_sequence[0] == 6 and shard.lost_messages == lost + 5
    deliver(intake, hello_message(0, 4343, "node-a"))  # Ray restarted the actor
    assert shard.hellos[0] == hellos + 1 and shard.next_sequence[0] == 0 and shard.actor_pids[0] == 4343


def test_a_senders_malformed_messages_are_logged_once_a_minute_each_with_the_total(intake, caplog):
    shard, _ = intake
    bad = experience(env_frames=-1)
    malformed = shard.receiver.malformed
    with caplog.at_level(logging.ERROR):
        for sender in ("noisy", "noisy", "noisy", "other", "noisy"):
            assert deliver(intake, replace(bad, sender=sender)) is None
    assert shard.receiver.malformed == malformed + 5
    lines = [record.getMessage() for record in caplog.records if "dropped a malformed" in record.getMessage()]
    assert len(lines) == 2, lines
    assert "from noisy" in lines[0] and f"({malformed + 1} malformed" in lines[0]
    assert "from other" in lines[1] and f"({malformed + 4} malformed" in lines[1]


def test_gradients_must_match_the_models_parameters(intake, monkeypatch):
    """A3C: one finite array of each parameter's shape, in order; anything else is dropped."""
    shard, _ = intake
    config = load_config(ROOT / "configs" / "a3c_cartpole.yaml", ["runtime.device=cpu"])
    learner = make_learner(config, *spaces_of(config))
    shapes = [tuple(parameter.shape) for parameter in learner.model.parameters()]
    monkeypatch.setattr(shard, "spec", replace(shard.spec, gradient_shapes=tuple(shapes)))
    rng = np.random.default_rng(0)
    good = [rng.normal(size=shape).astype(np.float32) for shape in shapes]

    def gradients(arrays: list[np.ndarray]) -> Message:
        return gradients_message(1, 0, arrays, 12, np.zeros(0), np.zeros(0, np.int64), 12, {"loss_policy": 0.5})

    nan = [array.copy() for array in good]
    nan[0].flat[0] = np.nan
    wrong = {"a parameter short": good[:-1], "a parameter more": [*good, good[0]],
             "a transposed weight": [good[0].T, *good[1:]], "NaN": nan}
    malformed = shard.receiver.malformed
    for arrays in wrong.values():
        assert deliver(intake, gradients(arrays)) is None
    assert shard.receiver.malformed == malformed + len(wrong)
    assert deliver(intake, experience()) is None  # this learner takes gradients only
    item = deliver(intake, gradients(good))
    assert isinstance(item, ActorGradients) and item.diagnostics == {"loss_policy": 0.5}
    assert learner.apply_gradients(item.gradients, 12)["nonfinite_steps"] == 0.0
    for arrays in wrong.values():
        with pytest.raises(MalformedMessage, match="gradient"):
            read_gradients(decode(encode(gradients(arrays)), KINDS), shard.spec)


@pytest.mark.parametrize("field, value", [("sequence", -2), ("env_errors", 1 << 62), ("policy_id", 7),
                                          ("actor_index", True), ("env_frames", 2.0)])
def test_the_readers_error_names_the_field(field, value):
    with pytest.raises(MalformedMessage, match=f"^{field}: "):
        read_experience(decode(encode(experience(**{field: value})), KINDS))


def test_a_message_that_arrives_after_a_later_one_is_not_lost_twice() -> None:
    """Out of order (another way through the tree): the gap it left counted it lost; its arrival
    takes that back, and the numbering does not move back to count the later ones again."""
    from types import SimpleNamespace

    from lamarckian_hpc.runtime.learner.intake import ExperienceIntake

    intake = ExperienceIntake()
    intake.next_sequence, intake.lost_messages = {}, 0
    for sequence in (0, 1, 3, 2, 4, 5):
        intake._check_sequence(SimpleNamespace(actor_index=7, sequence=sequence))
    assert intake.lost_messages == 0 and intake.next_sequence[7] == 6
    intake._check_sequence(SimpleNamespace(actor_index=7, sequence=9))  # 6, 7 and 8 never come
    assert intake.lost_messages == 3
