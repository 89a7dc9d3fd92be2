"""EMOGI: behaviour objectives by hand, the reward terms in the env, and tiny runs that write their
population, front and policies to the run file (serially, and through `evolve` on Ray)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lamarckian_hpc.cli import main
from lamarckian_hpc.config import ConfigError, load_config
from lamarckian_hpc.config.emogi import EMOGIConfig
from lamarckian_hpc.ec import Evaluator
from lamarckian_hpc.envs import PongEnv
from lamarckian_hpc.envs.pong_core import STAY, UP
from lamarckian_hpc.evorl.behaviour import GENOME_NAMES, EpisodeTrace, behaviour_of, objectives, reward_terms
from lamarckian_hpc.evorl.emogi import (
    METRIC_NAMES,
    EMOGIProgram,
    PolicyTrainer,
    PongBehaviour,
    individual_run_config,
    play,
)
from lamarckian_hpc.evorl.emogi_store import population_shape, read_results, write_results
from lamarckian_hpc.models import ActorCritic
from lamarckian_hpc.population.worker_pool import InProcessPool
from lamarckian_hpc.population.workflow import PopulationRuntime, run_population
from lamarckian_hpc.rl.learner import load_weights
from lamarckian_hpc.storage import RunWriter, open_run

TINY = {
    "env": {"id": "lamarckian/Pong-v0", "num_envs": 2, "kwargs": {"points_to_win": 2}},
    "model": {"policy_hidden_sizes": [16], "critic_hidden_sizes": [], "share_trunk": False, "activation": "tanh"},
    "ppo": {"batch_size": 256, "num_epochs": 1, "num_minibatches": 2},
    "algorithm": {"name": "emogi", "population_size": 2, "generations": 2, "initial_env_frames": 512,
                  "offspring_env_frames": 256, "evaluation_episodes": 2},
    "runtime": {"mode": "serial"},
}


def test_behaviour_objectives_of_a_hand_worked_trajectory():
    # Episode A: moves on 3 of 4 steps, one point each (1:1 of 2 to win): score (1-1+2)/4 = 0.5, lost.
    # Episode B: moves on 1 of 5 steps, wins 2:0: score (2-0+2)/4 = 1.0, won.
    episodes = [EpisodeTrace(np.array([1, 1, 0, 1], bool), np.array([0, 1, 0, -1])),
                EpisodeTrace(np.array([0, 0, 1, 0, 0], bool), np.array([1, 0, 0, 1, 0]))]
    behaviour = behaviour_of(episodes, points_to_win=2)
    assert behaviour.normalized_score == pytest.approx(0.75)
    assert behaviour.activeness == pytest.approx((0.75 + 0.2) / 2)
    assert behaviour.win_rate == pytest.approx(0.5)
    assert behaviour.point_difference == pytest.approx(1.0)
    # f1 = score + activeness, f2 = score + (1 - activeness), negated for minimisation.
    np.testing.assert_allclose(objectives(behaviour), [-(0.75 + 0.475), -(0.75 + 0.525)])
    np.testing.assert_allclose(objectives(behaviour, 2.0), [-(0.75 + 0.95), -(0.75 + 1.05)])
    with pytest.raises(ValueError, match="at least one episode"):
        behaviour_of([], 2)


def test_a_genome_becomes_per_step_move_and_stay_rewards():
    terms = reward_terms(np.array([0.5, 0.2]), horizon_steps=100)
    assert terms == pytest.approx({"move_reward": 0.005, "stay_reward": 0.002})
    env = PongEnv(**terms)
    env.reset(seed=0)
    _, reward, _, _, info = env.step(UP)
    assert info["point"] == 0 and reward == pytest.approx(0.005)
    _, reward, _, _, _ = env.step(STAY)
    assert reward == pytest.approx(0.002)
    run = individual_run_config(load_config(None, [], EMOGIConfig), np.array([0.5, 0.2]), seed=3, env_frames=10)
    assert run.env.kwargs["move_reward"] == pytest.approx(0.5 / 30)  # the default horizon: 30 steps
    assert run.env.kwargs["stay_reward"] == pytest.approx(0.2 / 30) and run.stop.total_env_steps == 10


def test_config_rejects_what_emogi_cannot_run():
    with pytest.raises(ConfigError, match="env: id must be one of lamarckian/Pong-v0"):
        load_config(None, ["env.id=CartPole-v1"], EMOGIConfig)
    with pytest.raises(ConfigError, match="env: kwargs must not set move_reward"):
        load_config(None, ["env.kwargs={move_reward: 0.1}"], EMOGIConfig)
    with pytest.raises(ConfigError, match="population_size must be even"):
        load_config(None, ["algorithm.population_size=3"], EMOGIConfig)


class RecordingTrainer(PolicyTrainer):
    """The worker's trainer that remembers its requests' policies and fails the fourth (the second
    policy of the second generation; without batched updates a request holds one policy)."""

    def __init__(self, config: EMOGIConfig, slots: list[int]) -> None:
        super().__init__(config, slots)
        self.requests: list[tuple[int, object]] = []  # (env frames, initial weights)

    def train_and_evaluate_all(self, jobs):
        self.requests += [(frames, weights) for _, _, frames, weights in jobs]
        if len(self.requests) == 4:
            raise RuntimeError("this training crashes")
        return super().train_and_evaluate_all(jobs)


def test_tiny_run_writes_population_front_and_policies_and_they_round_trip(tmp_path):
    config = EMOGIConfig.model_validate({**TINY, "runtime": {"mode": "serial", "batched_updates": False}})
    path = tmp_path / "emogi.h5"
    writer = RunWriter(path, config.to_json_dict(), METRIC_NAMES, population_shape=population_shape())
    lines: list[str] = []
    trained: list[tuple[int, int]] = []
    program = EMOGIProgram(config, on_individual=lambda generation, index, _: trained.append((generation, index)))
    pool = InProcessPool(lambda slots: RecordingTrainer(config, slots), 0)
    try:
        run_population(program, PopulationRuntime(), writer, report=lines.append, pool=pool)
    finally:
        pool.close()
    writer.close()
    result = program.result
    write_results(path, result)
    assert len(lines) == 2 and lines[-1].startswith("generation 2/2  front ")
    assert sorted(trained) == [(0, 0), (0, 1), (1, 0), (1, 1)]

    # Offspring start from their first parent's trained policy, and train the offspring budget.
    first, second = pool.host.requests[:2], pool.host.requests[2:]
    assert all(weights is None and frames == 512 for frames, weights in first)
    for k, (frames, weights) in enumerate(second):
        parent = result.history[2 + k].parent_ids[0]
        assert weights is result.policies[parent] and frames == 256

    with open_run(path) as reader:
        population = reader.population()
        assert reader.genome_names() == list(GENOME_NAMES)
        front_size = reader.metric("front_size")
    np.testing.assert_array_equal(population["generation"], [0, 0, 1, 1])
    np.testing.assert_array_equal(population["id"], [m.id for m in result.history])
    assert set(population["parent_ids"][2:].ravel()) <= set(population["id"][:2])
    np.testing.assert_array_equal(population["parent_ids"][:2], -1)
    assert np.isinf(population["objectives"][3]).all()  # the failed training: worst objectives, no policy
    assert np.isfinite(population["objectives"][[0, 1, 2]]).all()
    assert (population["genome"] >= 0).all() and (population["genome"] <= 1).all()
    assert len(front_size) == 2

    stored = read_results(path)
    failed_id = int(population["id"][3])
    assert failed_id not in stored.policies and failed_id not in stored.front_ids
    assert set(stored.front_ids) <= set(stored.population_ids) and len(stored.front_ids) >= 1
    # A stored policy plays exactly the behaviour recorded for it, and its objectives are the row's.
    identifier = int(stored.front_ids[0])
    row = int(np.flatnonzero(stored.behaviour["id"] == identifier)[0])
    model = ActorCritic(PongEnv().observation_space, PongEnv().action_space, config.model)
    load_weights(model, stored.policies[identifier])
    for name, tensor in model.state_dict().items():
        np.testing.assert_array_equal(tensor.numpy(), result.policies[identifier][name])
    replay = behaviour_of(play(model, config.env.kwargs, 2, seed=config.seed * 1_000 + 1), points_to_win=2)
    assert replay.activeness == pytest.approx(stored.behaviour["activeness"][row])
    assert replay.normalized_score == pytest.approx(stored.behaviour["normalized_score"][row])
    member = result.individual(identifier)
    np.testing.assert_allclose(population["objectives"][list(population["id"]).index(identifier)], objectives(replay))
    assert member.behaviour is not None and member.behaviour.activeness == pytest.approx(replay.activeness)


@pytest.mark.second_pass
def test_evolve_runs_emogi_on_ray_like_serially_and_prints_the_front(tmp_path, capsys):
    overrides = [f"{key}={value}" for key, value in {
        "env.num_envs": 2, "env.kwargs": "{points_to_win: 2}", "model.policy_hidden_sizes": "[16]",
        "ppo.batch_size": 256, "ppo.num_epochs": 1, "algorithm.population_size": 2, "algorithm.generations": 2,
        "algorithm.initial_env_frames": 256, "algorithm.offspring_env_frames": 256,
        "algorithm.evaluation_episodes": 1, "runtime.num_workers": 2, "runtime.batched_updates": "false",
        "storage.directory": str(tmp_path)}.items()]
    assert main(["evolve", "configs/emogi_pong.yaml", *overrides, "runtime.mode=serial", "storage.run_name=serial"]) == 0
    assert main(["evolve", "configs/emogi_pong.yaml", *overrides, "runtime.mode=ray", "storage.run_name=emogi"]) == 0
    out = capsys.readouterr().out
    assert "non-dominated policies" in out and str(tmp_path / "emogi.h5") in out
    with open_run(tmp_path / "emogi.h5") as reader:
        population = reader.population()
        assert reader.closed_cleanly
    assert len(population["id"]) == 4 and len(set(population["worker"])) >= 1
    assert (population["worker"] > 0).all() and (population["env_frames"] >= 256).all()
    stored = read_results(tmp_path / "emogi.h5")
    assert set(stored.policies) == set(int(i) for i in population["id"])
    # Every training is seeded: the Ray run's population is the serial run's.
    with open_run(tmp_path / "serial.h5") as reader:
        serial = reader.population()
    for column in ("id", "parent_ids", "genome", "objectives", "env_frames"):
        np.testing.assert_array_equal(population[column], serial[column])


def test_policy_play_is_deterministic_for_a_seed():
    torch.manual_seed(0)
    model = ActorCritic(PongEnv().observation_space, PongEnv().action_space,
                        EMOGIConfig.model_validate(TINY).model)
    first = play(model, {"points_to_win": 1}, 2, seed=5)
    second = play(model, {"points_to_win": 1}, 2, seed=5)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a.moved, b.moved)
        np.testing.assert_array_equal(a.points, b.points)


def test_pong_behaviour_is_an_evaluator_for_the_generic_driver():
    config = EMOGIConfig.model_validate(TINY)
    evaluator = PongBehaviour(config)
    assert isinstance(evaluator, Evaluator)
    description = evaluator.describe()
    assert description.num_objectives == 2 and description.genome_length == 2
    genomes = evaluator.initialize(np.random.default_rng(0), 3)
    assert genomes.shape == (3, 2) and (genomes >= 0).all() and (genomes <= 1).all()
    found = evaluator.evaluate(genomes[:1])
    assert found.shape == (1, 2) and np.isfinite(found).all() and (found <= 0).all()


def test_a_workers_policies_train_together_as_they_train_one_by_one():
    """Batched, the two policies of a generation train in lockstep on the one worker: the same
    frames, and weights within float rounding of training each alone."""
    from lamarckian_hpc.evorl.emogi import train_and_evaluate_together

    config = EMOGIConfig.model_validate(TINY)
    jobs = [(np.array([0.2, 0.7]), 11, 512, None), (np.array([0.9, 0.1]), 12, 512, None)]
    together = train_and_evaluate_together(config, jobs, batched=True)
    alone = train_and_evaluate_together(config, jobs, batched=False)
    for mine, theirs in zip(together, alone):
        assert mine.env_frames == theirs.env_frames >= 512
        for name, array in theirs.weights.items():
            np.testing.assert_allclose(mine.weights[name], array, rtol=1e-4, atol=1e-5, err_msg=name)
