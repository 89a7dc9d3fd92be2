"""The GPU learner's paths, checked where they run on the CPU too: Adam's fused step and its skip
from a device flag, GuardedSteps deciding on the device without reading anything back, the
transfer function, the device choice; and the recorded (CUDA graph) update, which needs a GPU and
skips without one (benchmarks/scale/gpu_learner_check.py runs it on one)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from lamarckian_hpc.config import ModelConfig, PPOConfig, build_config
from lamarckian_hpc.mdp.experience import ExperienceBatch
from lamarckian_hpc.models import ActorCritic
from lamarckian_hpc.rl import RolloutBatch, ppo_loss, ppo_update
from lamarckian_hpc.rl.adam import Adam
from lamarckian_hpc.rl.captured import CapturedSteps, why_not_captured
from lamarckian_hpc.rl.device import choose_device, to_device
from lamarckian_hpc.rl.optim import NONFINITE_STEPS, GuardedSteps
from lamarckian_hpc.runtime.algorithms import make_learner

CUDA = torch.cuda.is_available()


def _model(seed: int = 0, device: str = "cpu") -> ActorCritic:
    torch.manual_seed(seed)
    env = gym.make("CartPole-v1")
    config = ModelConfig(policy_hidden_sizes=(16,), critic_hidden_sizes=(8,))
    return ActorCritic(env.observation_space, env.action_space, config).to(device)


def _batch(model: ActorCritic, size: int = 64, reward: float | None = None) -> RolloutBatch:
    generator = torch.Generator().manual_seed(1)
    observations = torch.randn(size, 4, generator=generator)
    with torch.no_grad():
        actions, log_probs = model.act(observations.to(next(model.parameters()).device))
    advantages = torch.randn(size, generator=generator) if reward is None else torch.full((size,), reward)
    returns = 2.0 * observations[:, 0] if reward is None else torch.full((size,), reward)
    device = next(model.parameters()).device
    return RolloutBatch(observations.to(device), actions, log_probs, advantages.to(device), returns.to(device))


def _state(model: torch.nn.Module, optimizer: Adam) -> list[torch.Tensor]:
    tensors = [p.detach().clone() for p in model.parameters()]
    for state in optimizer.state.values():
        tensors += [value.detach().clone() for value in state.values()]
    return tensors


def test_fused_adam_steps_bitwise_as_torchs_fused_adam_and_keeps_the_state_layout():
    """On the CPU too: the fused path is torch.optim.Adam(fused=True)'s update, and its state loads
    into the multi-tensor Adam and back."""
    def trained(make_optimizer, steps: int) -> tuple[ActorCritic, object]:
        model = _model()
        optimizer = make_optimizer(model.parameters())
        batch = _batch(model)
        for _ in range(steps):
            optimizer.zero_grad(set_to_none=True)
            ppo_loss(model, batch, PPOConfig())[0].backward()
            optimizer.step()
        return model, optimizer

    reference, _ = trained(lambda p: torch.optim.Adam(p, lr=3e-3, eps=1e-5, fused=True), 20)
    ours, optimizer = trained(lambda p: Adam(p, lr=3e-3, eps=1e-5, fused=True), 20)
    assert all(torch.equal(a, b) for a, b in zip(reference.parameters(), ours.parameters()))
    plain = Adam(_model().parameters(), lr=3e-3, eps=1e-5)
    plain.load_state_dict(optimizer.state_dict())
    assert all(float(state["step"]) == 20.0 for state in plain.state.values())


def test_fused_adam_skips_a_flagged_step_leaving_parameters_moments_and_counts():
    model = _model()
    optimizer = Adam(model.parameters(), lr=1e-2, fused=True)
    batch = _batch(model)
    for flag in (0.0, 1.0):
        optimizer.zero_grad(set_to_none=True)
        ppo_loss(model, batch, PPOConfig())[0].backward()
        before = _state(model, optimizer)
        optimizer.step(found_inf=torch.tensor(flag))
        after = _state(model, optimizer)
        unchanged = all(torch.equal(a, b) for a, b in zip(before, after))
        assert unchanged == (flag == 1.0)
    assert all(float(state["step"]) == 1.0 for state in optimizer.state.values())
    with pytest.raises(ValueError, match="fused"):
        Adam(model.parameters()).step(found_inf=torch.tensor(0.0))


def test_sync_free_steps_skip_a_nonfinite_minibatch_without_reading_anything_back(monkeypatch):
    """The decision is made on the device: while the steps run, any read of a tensor's value on the
    host (bool, item, tolist) fails; the NaN minibatches leave parameters and Adam's state as they
    were, and the one read at the end counts them."""
    model = _model()
    optimizer = Adam(model.parameters(), lr=1e-2, fused=True)
    steps = GuardedSteps(model, optimizer, 0.5)
    assert steps.sync_free
    good, bad = _batch(model), _batch(model, reward=float("nan"))
    steps.step(*ppo_loss(model, good, PPOConfig()))  # Adam's state exists from here on
    before = _state(model, optimizer)

    def no_read(*args, **kwargs):
        raise AssertionError("a tensor was read on the host during the steps")

    with monkeypatch.context() as patch:
        for name in ("__bool__", "item", "tolist", "__float__"):
            patch.setattr(torch.Tensor, name, no_read)
        for _ in range(3):
            assert steps.step(*ppo_loss(model, bad, PPOConfig())) is None
    assert all(torch.equal(a, b) for a, b in zip(before, _state(model, optimizer)))
    diagnostics = steps.diagnostics()
    assert diagnostics[NONFINITE_STEPS] == 3 and steps.taken == 1
    assert np.isfinite(diagnostics["loss_policy"])  # the mean over the one step taken
    steps.step(*ppo_loss(model, good, PPOConfig()))
    assert not all(torch.equal(a, b) for a, b in zip(before, _state(model, optimizer)))


def test_a_sync_free_update_learns_as_the_host_checked_one():
    """ppo_update with the fused Adam (deciding on the device) against the multi-tensor one
    (deciding on the host): the same minibatches, parameters equal to float32 rounding."""
    config = PPOConfig(batch_size=64, num_minibatches=4, num_epochs=2)
    results = []
    for fused in (False, True):
        model = _model()
        optimizer = Adam(model.parameters(), lr=3e-3, eps=1e-5, fused=fused)
        diagnostics = ppo_update(model, optimizer, _batch(model), config, np.random.default_rng(0))
        results.append((model, diagnostics))
    (plain, plain_diagnostics), (fused_model, fused_diagnostics) = results
    for a, b in zip(plain.parameters(), fused_model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert plain_diagnostics.keys() == fused_diagnostics.keys()
    for name, value in plain_diagnostics.items():
        assert fused_diagnostics[name] == pytest.approx(value, rel=1e-4, abs=1e-6), name


def test_to_device_keeps_the_dtype_and_shares_memory_on_the_cpu():
    frames = np.random.default_rng(0).integers(0, 256, (3, 4, 8, 8), dtype=np.uint8)
    tensor = to_device(frames, torch.device("cpu"))
    assert tensor.dtype == torch.uint8 and np.shares_memory(tensor.numpy(), frames)


@pytest.mark.skipif(CUDA, reason="checks the choice on a machine without a GPU")
def test_auto_takes_the_cpu_without_a_gpu_and_says_why():
    device, reason = choose_device("auto", "cnn", "ppo")
    assert device.type == "cpu" and "no GPU" in reason
    with pytest.raises(ValueError, match="runtime.device is 'cuda'"):
        choose_device("cuda")
    assert choose_device("cpu")[1] == "runtime.device is cpu"


@pytest.mark.skipif(CUDA, reason="checks the choice on a machine without a GPU")
def test_a_learner_logs_its_device_and_why_and_trains_eagerly_on_the_cpu(caplog):
    config = build_config({"env": {"id": "CartPole-v1"}, "algorithm": {"batch_size": 64, "num_minibatches": 2},
                           "runtime": {"mode": "serial"}}, "test")
    env = gym.make("CartPole-v1")
    with caplog.at_level("INFO", logger="lamarckian_hpc.rl.learner"):
        learner = make_learner(config, env.observation_space, env.action_space)
    assert "learner on cpu: runtime.device is auto and torch sees no GPU" in caplog.text
    assert learner.captured() is None
    observations = np.random.default_rng(0).standard_normal((64, 4)).astype(np.float32)
    experience = ExperienceBatch(observations=observations, actions=np.zeros(64, dtype=np.int64),
                                 log_probs=np.full(64, -0.69, dtype=np.float32), rewards=np.ones(64, dtype=np.float32),
                                 policy_versions=np.zeros(64, dtype=np.int64), lengths=np.array([64]),
                                 terminated=np.array([False]), bootstrap_observations=observations[:1])
    assert learner.update(experience, 0)[NONFINITE_STEPS] == 0.0


def test_the_recorded_update_is_refused_on_the_cpu_with_its_reason():
    model = _model()
    assert why_not_captured(model, Adam(model.parameters(), fused=True)) == "the learner is on cpu"


@pytest.mark.skipif(not CUDA, reason="CUDA graphs need a GPU")
def test_the_recorded_update_equals_the_eager_one_and_skips_nonfinite_minibatches():
    config = PPOConfig(batch_size=256, num_minibatches=4, num_epochs=2)
    models = []
    for captured in (False, True):
        model = _model(device="cuda")
        optimizer = Adam(model.parameters(), lr=3e-3, eps=1e-5)
        assert why_not_captured(model, optimizer) is None
        batch, rng = _batch(model, 256), np.random.default_rng(0)
        if captured:
            steps = CapturedSteps(model, optimizer)
            diagnostics = [ppo_update(model, optimizer, batch, config, rng, captured=steps) for _ in range(2)]
            assert steps.recordings == 1
            before = _state(model, optimizer)
            skipped = ppo_update(model, optimizer, _batch(model, 256, reward=float("nan")), config, rng, captured=steps)
            assert skipped[NONFINITE_STEPS] == 8
            assert all(torch.equal(a, b) for a, b in zip(before, _state(model, optimizer)))
        else:
            diagnostics = [ppo_update(model, optimizer, batch, config, rng) for _ in range(2)]
        models.append((model, diagnostics))
    (eager, eager_diagnostics), (recorded, recorded_diagnostics) = models
    for a, b in zip(eager.parameters(), recorded.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert eager_diagnostics[1]["loss_value"] == pytest.approx(recorded_diagnostics[1]["loss_value"], rel=1e-4)
