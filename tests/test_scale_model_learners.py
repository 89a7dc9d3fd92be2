"""The scale model's learner ranks (benchmarks/scale/scale_model.py, benchmarks/scale/allreduce.py), on the
repository's own results files: the ring fit reproduces the points it was fitted on, one gloo
allreduce between two real processes sums, and the model's terms behave as the page says (one rank
pays no allreduce, ranks share the compute, aggregating relays cut the per-message cost, nothing
samples above linear)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks" / "scale"
sys.path.insert(0, str(BENCHMARKS))

import allreduce  # noqa: E402
import scale_model  # noqa: E402


def test_ring_fit_reproduces_its_calibration_points() -> None:
    fit = allreduce.fit_ring()
    for floats, ranks, milliseconds in allreduce.CALIBRATION_16_CORES:
        assert allreduce.ring_seconds(fit, floats, ranks) * 1e3 == pytest.approx(milliseconds, rel=0.2)
    assert allreduce.ring_seconds(fit, 10**6, 1) == 0.0
    local = allreduce.ring_seconds(fit, 10**6, 8)
    assert allreduce.ring_seconds(fit, 10**6, 8, network_gbit=10, network_latency_s=25e-6) > local


@pytest.mark.slow  # two spawned torch processes: about 5 s on a quiet 2-core machine, 30 s on a loaded one
def test_gloo_allreduce_between_two_processes_sums() -> None:
    samples = allreduce.measure(2, [1000], calls=3, warmup=1)  # raises unless every rank's sum is 2
    assert len(samples[1000]) == 3 and all(s > 0 for s in samples[1000])


@pytest.fixture(scope="module")
def model() -> tuple:
    args = argparse.Namespace(
        learner_ceiling=scale_model.RESULTS / "learner_ceiling.json", ceiling_label="after",
        allreduce=scale_model.RESULTS / "allreduce.json", network_gbit=10.0, network_latency_us=25.0,
        receive_ns_per_byte=2.7, relay_batch_rollouts=40, learner_table_cores=6000, max_learners=8,
        learner_batch=None, ring_latency_us=None, num_envs=8, rollout_steps=32, cores_per_node=40)
    fit = {"host_rate": {"tree": 1250.0}, "host_cpus": 0.05, "actors_per_host": 1, "batches_in_flight": 1.0}
    fan = scale_model.fan_in_costs(scale_model._load(scale_model.RESULTS / "fan_in.json"))
    return scale_model.learner_inputs(args, fit, fan), fit, fan, args


def test_learner_ranks_share_compute_and_pay_the_allreduce(model: tuple) -> None:
    inputs, fit, fan, args = model
    one, two = (scale_model.learner_point(inputs, "football", "cpu", n, 6000, fit, fan, args, 1) for n in (1, 2))
    assert one["allreduce_s"] == 0.0 and two["allreduce_s"] > 0.0
    assert two["compute_s"] == pytest.approx(one["compute_s"] / 2)
    assert one["batch"] == 6000 * 8 and one["message_frames"] == 8
    aggregated = scale_model.learner_point(inputs, "football", "cpu", 2, 6000, fit, fan, args, 40)
    assert aggregated["messages_s"] == pytest.approx(two["messages_s"] / 40)
    assert aggregated["steps_per_s"] > two["steps_per_s"]
    assert one["steps_per_s"] == pytest.approx(one["batch"] / one["update_s"])


def test_learner_table_never_samples_above_linear(model: tuple) -> None:
    inputs, fit, fan, args = model
    table = scale_model.learner_table(inputs, fit, fan, args)
    assert {row["learners"] for row in table["rows"]} == set(scale_model.LEARNER_COUNTS)
    assert all(0 < row["steps_per_s"] <= row["linear_steps_per_s"] for row in table["rows"])
    assert len(table["needed"]) == len(scale_model.SCALE_WORKLOADS) * len(scale_model.RANK_KINDS) * 4
    image = {row["ranks"]: row for row in table["rows"] if row["workload"] == "image pong" and row["learners"] == 1}
    assert image["gpu_projected"]["steps_per_s"] > image["cpu"]["steps_per_s"]


def test_the_model_sizes_messages_as_the_runtime_does(model: tuple) -> None:
    """The runtime's rule (`run_shape.timed_message_ticks`, from a config) and the model's (numbers
    only) agree; a fast environment's messages are whole rollouts at 6000 actors, a slow one's stay
    a share, and without a step time they are shares, as the calibration points ran."""
    from lamarckian_hpc.config import load_config
    from lamarckian_hpc.runtime.run_shape import timed_message_ticks

    config = load_config(Path(__file__).resolve().parents[1] / "configs" / "ppo_cartpole.yaml",
                         ["algorithm.batch_size=4096", "env.num_envs=8", "runtime.rollout_steps=32"])
    for actors in (1, 16, 6000):
        for step in (10e-6, 376e-6, 1 / 350):
            assert scale_model.message_frames(4096, actors, 8, 32, step) == timed_message_ticks(config, actors, step) * 8
    assert scale_model.message_frames(4096, 6000, 8, 32, 10e-6) == 256
    assert scale_model.message_frames(4096, 6000, 8, 32, 1 / 350) == scale_model.message_frames(4096, 6000, 8, 32) == 8
    inputs, fit, fan, args = model
    point = scale_model.learner_point(inputs, "image pong", "cpu", 1, 6000, fit, fan, args, 1)
    assert point["message_frames"] == 56 and point["batch"] == 6000 * 56  # 7 ticks of 376 us x 8 envs: 20 ms
