"""The torch-free policies of lean actors against the torch networks the learner trains: the same
state_dict layout, the same outputs and log-probabilities to float tolerance, the same sampling
distribution, clear refusals of weights that do not fit, and actor processes that never load torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from lamarckian_hpc.config import ModelConfig, load_config
from lamarckian_hpc.models import ActorCritic
from lamarckian_hpc.models.q_network import QNetwork
from lamarckian_hpc.runtime.actor.inference import EpsilonGreedyPolicy
from lamarckian_hpc.runtime.actor.network_layout import actor_critic_layout, q_network_layout
from lamarckian_hpc.runtime.actor.numpy_policy import NumpyActorCriticPolicy, NumpyEpsilonGreedyPolicy
from lamarckian_hpc.runtime.actor.sampling import needs_torch
from lamarckian_hpc.runtime.actor.sides import make_sampling_side
from lamarckian_hpc.runtime.algorithms import make_learner
from lamarckian_hpc.runtime.run_shape import spaces_of

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
ROOT = Path(__file__).resolve().parents[1]
TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}
VECTOR = gym.spaces.Box(-1.0, 1.0, (5,), np.float32)
DISCRETE, CONTINUOUS = gym.spaces.Discrete(3), gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

#: (model fields, action space, global state size): every shape of network an actor runs.
CASES = {
    "discrete-shared": (dict(policy_hidden_sizes=(16, 8), critic_hidden_sizes=(8,)), DISCRETE, 0),
    "discrete-own-critic-trunk": (dict(policy_hidden_sizes=(16,), critic_hidden_sizes=(), share_trunk=False),
                                  DISCRETE, 0),
    "continuous-shared": (dict(policy_hidden_sizes=(16, 8), critic_hidden_sizes=()), CONTINUOUS, 0),
    "continuous-own-critic-trunk": (dict(policy_hidden_sizes=(8, 8, 8), share_trunk=False, initial_log_std=-0.5),
                                    CONTINUOUS, 0),
    "centralised-critic": (dict(policy_hidden_sizes=(16,), critic_hidden_sizes=(8,)), DISCRETE, 3),
}
ACTIVATIONS = ("leaky_relu", "tanh", "relu")


def _model_config(fields: dict, activation: str) -> ModelConfig:
    return ModelConfig.model_validate({**fields, "activation": activation})


def _randomised(model: torch.nn.Module, seed: int) -> dict[str, np.ndarray]:
    """Weights far from the initialisation (whose 0.01-gain heads give near-uniform outputs), so
    that a wrong layer or activation shows; loaded into `model` and returned as a broadcast."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.7)
    return {name: tensor.numpy().copy() for name, tensor in model.state_dict().items()}


def _pair(case: str, activation: str) -> tuple[ActorCritic, NumpyActorCriticPolicy, np.ndarray]:
    fields, action_space, global_state_size = CASES[case]
    config = _model_config(fields, activation)
    model = ActorCritic(VECTOR, action_space, config, global_state_size)
    policy = NumpyActorCriticPolicy(actor_critic_layout(VECTOR, action_space, config, global_state_size),
                                    activation, seed=3)
    policy.load_weights(_randomised(model, seed=11))
    observations = np.random.default_rng(5).normal(0.0, 2.0, (64, 5 + global_state_size)).astype(np.float32)
    return model, policy, observations


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_layout_is_the_torch_state_dict(case):
    fields, action_space, global_state_size = CASES[case]
    config = _model_config(fields, "tanh")
    torch_shapes = {name: tuple(tensor.shape) for name, tensor in
                    ActorCritic(VECTOR, action_space, config, global_state_size).state_dict().items()}
    assert actor_critic_layout(VECTOR, action_space, config, global_state_size).shapes() == torch_shapes
    images = gym.spaces.Box(0, 255, (2, 3, 4), np.uint8)  # flattened by both
    assert actor_critic_layout(images, action_space, config).shapes() == {
        name: tuple(tensor.shape) for name, tensor in ActorCritic(images, action_space, config).state_dict().items()}
    q_shapes = {name: tuple(tensor.shape) for name, tensor in QNetwork(VECTOR, DISCRETE, config).state_dict().items()}
    assert q_network_layout(VECTOR, DISCRETE, config).shapes() == q_shapes


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_outputs_and_log_probs_match_torch(case, activation):
    model, policy, observations = _pair(case, activation)
    rows = torch.from_numpy(observations)
    with torch.no_grad():
        features = model.trunk(model.own(rows))
        head = model.head.logits if hasattr(model.head, "logits") else model.head.mean
        np.testing.assert_allclose(policy.outputs(observations), head(features).numpy(), **TOLERANCE)
        actions = policy(observations).actions
        expected, _, _ = model.evaluate(rows, torch.from_numpy(actions))
    np.testing.assert_allclose(policy.log_probs(observations, actions), expected.numpy(), **TOLERANCE)
    # What the sampler records with each action is its log-probability under the torch model.
    sampled = policy(observations)
    with torch.no_grad():
        expected, _, _ = model.evaluate(rows, torch.from_numpy(sampled.actions))
    np.testing.assert_allclose(sampled.log_probs, expected.numpy(), **TOLERANCE)
    assert sampled.log_probs.dtype == np.float32


def test_an_empty_trunk_is_the_flattened_observation():
    # The config asks for at least one policy layer; the networks themselves take none.
    config = ModelConfig.model_construct(**{**ModelConfig().model_dump(), "policy_hidden_sizes": ()})
    model = ActorCritic(VECTOR, CONTINUOUS, config)
    policy = NumpyActorCriticPolicy(actor_critic_layout(VECTOR, CONTINUOUS, config), config.activation, seed=0)
    policy.load_weights(_randomised(model, seed=2))
    observations = np.random.default_rng(0).normal(size=(8, 5)).astype(np.float32)
    with torch.no_grad():
        expected = model.head.mean(model.trunk(torch.from_numpy(observations))).numpy()
    np.testing.assert_allclose(policy.outputs(observations), expected, **TOLERANCE)


def test_categorical_samples_follow_the_torch_distribution():
    model, policy, observations = _pair("discrete-shared", "leaky_relu")
    with torch.no_grad():
        all_probabilities = torch.softmax(model.head.logits(model.trunk(torch.from_numpy(observations))), -1).numpy()
    balanced = int(all_probabilities.min(axis=1).argmax())  # every action is drawn often enough to be counted
    probabilities = all_probabilities[balanced]
    assert probabilities.min() > 0.05
    row = np.repeat(observations[balanced:balanced + 1], 50_000, axis=0)
    frequencies = np.bincount(policy(row).actions, minlength=3) / len(row)
    np.testing.assert_allclose(frequencies, probabilities, atol=0.01)  # about 4 standard errors


def test_gaussian_samples_follow_the_torch_distribution():
    model, policy, observations = _pair("continuous-own-critic-trunk", "tanh")
    row = np.repeat(observations[:1], 50_000, axis=0)
    with torch.no_grad():
        mean = model.head.mean(model.trunk(torch.from_numpy(row[:1]))).numpy()[0]
        std = model.head.log_std.exp().numpy()
    standardised = (policy(row).actions - mean) / std
    np.testing.assert_allclose(standardised.mean(axis=0), 0.0, atol=0.02)
    np.testing.assert_allclose(standardised.std(axis=0), 1.0, atol=0.02)


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_epsilon_greedy_acts_as_the_torch_policy_for_the_same_seed(activation):
    config = _model_config({"policy_hidden_sizes": (16, 16)}, activation)
    network = QNetwork(VECTOR, DISCRETE, config)
    weights = _randomised(network, seed=4)
    lean = NumpyEpsilonGreedyPolicy(q_network_layout(VECTOR, DISCRETE, config), activation, seed=9, epsilon=0.3)
    lean.load_weights(weights)
    reference = EpsilonGreedyPolicy(network, 3, seed=9, epsilon=0.3)
    observations = np.random.default_rng(1).normal(0.0, 2.0, (256, 5)).astype(np.float32)
    with torch.no_grad():
        np.testing.assert_allclose(lean.outputs(observations), network(torch.from_numpy(observations)).numpy(),
                                   **TOLERANCE)
    for _ in range(3):
        np.testing.assert_array_equal(lean(observations).actions, reference(observations).actions)


def test_weights_that_do_not_fit_are_refused_by_name():
    model, policy, _ = _pair("discrete-shared", "tanh")
    weights = {name: tensor.numpy() for name, tensor in model.state_dict().items()}
    with pytest.raises(ValueError, match=r"unknown: trunk\.1\.4\.weight"):
        policy.load_weights({**weights, "trunk.1.4.weight": np.zeros((4, 8), np.float32)})
    with pytest.raises(ValueError, match=r"missing: head\.logits\.bias"):
        policy.load_weights({name: array for name, array in weights.items() if name != "head.logits.bias"})
    with pytest.raises(ValueError, match=r"wrong shape: head\.logits\.weight \(2, 8\) \(expected \(3, 8\)\)"):
        policy.load_weights({**weights, "head.logits.weight": np.zeros((2, 8), np.float32)})
    with pytest.raises(ValueError, match=r"not floating: critic\.1\.bias"):
        policy.load_weights({**weights, "critic.1.bias": np.zeros(1, np.int64)})
    with pytest.raises(ValueError, match="model.kind='mlp' only"):
        actor_critic_layout(gym.spaces.Box(0, 255, (64, 64, 3), np.uint8), DISCRETE, ModelConfig(kind="cnn"))


def test_actors_that_must_run_torch_get_a_torch_model():
    assert needs_torch(load_config(CONFIGS / "ppo_cartpole.yaml", ["model.kind=cnn"]))  # convolutions stay on torch
    assert not needs_torch(load_config(CONFIGS / "impala_cartpole.yaml"))
    for config_file, overrides in (("a3c_cartpole.yaml", []), ("ppo_cartpole.yaml", ["runtime.rollout_steps=4"])):
        config = load_config(CONFIGS / config_file, overrides)
        lean = make_sampling_side(config, seed=0)
        forced = make_sampling_side(config, seed=0, use_torch=True)
        try:
            assert isinstance(forced.model, torch.nn.Module)
            assert (lean.model is None) == (config.algorithm.name != "a3c")
        finally:
            lean.close()
            forced.close()


#: Runs in a fresh interpreter: imports what an actor process imports, then samples as ActorLoop
#: does (weights from a learner, a rollout, the experience taken), for each algorithm's policy.
LEAN_ACTOR = """
import json, sys
import numpy as np
import lamarckian_hpc.runtime.placement.ray_actors  # what Ray imports to start an actor
from lamarckian_hpc.config import load_config
from lamarckian_hpc.runtime.actor.sides import make_sampling_side
report = {}
for config_file, weights_file in json.loads(sys.argv[1]):
    config = load_config(config_file, ["runtime.rollout_steps=8"])
    side = make_sampling_side(config, seed=1)
    with np.load(weights_file) as weights:
        side.load_weights(dict(weights))
    side.sample(32)
    batch = side.experience.take()
    side.close()
    report[config.env.id + "/" + config.algorithm.name] = [len(batch), batch.actions.dtype.str,
                                                           bool(np.isfinite(batch.log_probs).all())]
report["torch"] = "torch" in sys.modules
report["h5py"] = "h5py" in sys.modules  # the run file is the learner's: actors never write one
print(json.dumps(report))
"""


def test_an_actor_that_only_acts_never_imports_torch(tmp_path):
    jobs = []
    for name in ("ppo_cartpole.yaml", "impala_cartpole.yaml", "dqn_cartpole.yaml", "ppo_pendulum.yaml"):
        config = load_config(CONFIGS / name)
        weights_file = tmp_path / f"{name}.npz"
        np.savez(weights_file, **make_learner(config, *spaces_of(config)).weights())
        jobs.append((str(CONFIGS / name), str(weights_file)))
    finished = subprocess.run([sys.executable, "-c", LEAN_ACTOR, json.dumps(jobs)], capture_output=True, text=True,
                              cwd=ROOT, timeout=120)
    assert finished.returncode == 0, finished.stderr
    report = json.loads(finished.stdout)
    assert report.pop("torch") is False
    assert report.pop("h5py") is False
    assert len(report) == 4
    for key, (steps, dtype, finite) in report.items():
        assert steps >= 32 and finite, key
        assert dtype == ("<f4" if "Pendulum" in key else "<i8"), key
