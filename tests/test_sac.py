"""SAC: the squashed Gaussian's log-probabilities, the soft Bellman target, the Polyak step, the
entropy temperature's direction, checkpoints that continue the same optimisation, and learning
Pendulum serially and with actor processes."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.distributions import AffineTransform, Normal, TanhTransform, TransformedDistribution

from lamarckian_hpc.config import ALGORITHMS, ModelConfig, SACConfig, load_config
from lamarckian_hpc.rl.sac import (
    SACPolicy,
    SquashedGaussianActor,
    TwinQ,
    actor_loss,
    alpha_loss,
    critic_loss,
    soft_update,
)
from lamarckian_hpc.rl.sac_learner import SACLearner
from lamarckian_hpc.runtime.actor.sides import make_sampling_side
from lamarckian_hpc.runtime.algorithms import make_learner
from lamarckian_hpc.runtime.learner.checkpoint import (
    TrainingCheckpoint,
    TrainingProgress,
    load_checkpoint,
    save_checkpoint,
)
from lamarckian_hpc.runtime.learner.episodes import RecentEpisodes
from lamarckian_hpc.runtime.run_shape import spaces_of
from lamarckian_hpc.runtime.runners.trainer import SerialTrainer

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
SAC_PENDULUM = CONFIGS / "sac_pendulum.yaml"
OBSERVATIONS = gym.spaces.Box(-8.0, 8.0, (3,), np.float32)
ACTIONS = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))
SMALL = ModelConfig(policy_hidden_sizes=(32, 32), critic_hidden_sizes=(32, 32), activation="relu")


@pytest.fixture(autouse=True)
def one_torch_thread():
    """The learner's thread count in a run (runtime.torch_threads): on a busy small machine two
    threads that wait for each other make every gradient step many times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _small_config(*overrides: str):
    return load_config(SAC_PENDULUM, ["model.policy_hidden_sizes=[32,32]", "model.critic_hidden_sizes=[32,32]",
                                      "algorithm.learning_starts=200", "algorithm.minibatch_size=32", *overrides])


def test_squashed_log_prob_matches_torch_distributions():
    torch.manual_seed(0)
    actor = SquashedGaussianActor(OBSERVATIONS, ACTIONS, SMALL)
    observations = torch.randn(512, 3) * 3
    actions, log_probs = actor.sample(observations, torch.Generator().manual_seed(1))
    mean, log_std = actor.distribution(observations)
    reference = TransformedDistribution(Normal(mean, log_std.exp()), [
        TanhTransform(), AffineTransform(actor.action_bias, actor.action_scale)])
    inside = (actions - actor.action_bias).abs() < actor.action_scale * (1 - 1e-3)  # atanh is exact away from +-1
    inside = inside.all(dim=1)
    assert inside.sum() > 400
    expected = reference.log_prob(actions).sum(-1)
    torch.testing.assert_close(log_probs[inside], expected[inside], atol=2e-3, rtol=1e-4)
    low, high = torch.tensor(ACTIONS.low), torch.tensor(ACTIONS.high)
    assert bool(((actions >= low) & (actions <= high)).all())


def test_squashed_density_integrates_to_one():
    """Monte Carlo: E_pi[1 / pi(a)] over a box of volume V is V when the density is right (1-d)."""
    space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    actor = SquashedGaussianActor(OBSERVATIONS, space, SMALL)
    with torch.no_grad():
        actor.mean.weight.zero_(), actor.mean.bias.fill_(0.3), actor.log_std.weight.zero_()
        actor.log_std.bias.fill_(0.0)
        grid = torch.linspace(-1.999, 1.999, 40001)
        mean, log_std = actor.distribution(torch.zeros(1, 3))
        std = log_std.exp()
        pre_tanh = torch.atanh(grid / 2.0)
        density = torch.exp(Normal(mean[0, 0], std[0, 0]).log_prob(pre_tanh)) / (2.0 * (1 - torch.tanh(pre_tanh) ** 2))
        _, log_probs = actor.sample(torch.zeros(4000, 3), torch.Generator().manual_seed(0))
    assert float(torch.trapezoid(density, grid)) == pytest.approx(1.0, abs=2e-3)
    # The sampled log-probs are the log of that density at the sampled actions: their mean is -entropy.
    entropy = -float(torch.trapezoid(density * density.clamp_min(1e-30).log(), grid))
    assert float(-log_probs.mean()) == pytest.approx(entropy, abs=0.05)


def test_soft_update_moves_the_target_by_tau():
    torch.manual_seed(0)
    source, target = TwinQ(OBSERVATIONS, ACTIONS, SMALL), TwinQ(OBSERVATIONS, ACTIONS, SMALL)
    before = [p.detach().clone() for p in target.parameters()]
    soft_update(target, source, 0.1)
    for old, new, src in zip(before, target.parameters(), source.parameters()):
        torch.testing.assert_close(new, old + 0.1 * (src - old))


def test_critic_target_is_the_soft_bellman_backup():
    torch.manual_seed(0)
    actor = SquashedGaussianActor(OBSERVATIONS, ACTIONS, SMALL)
    critic, target = TwinQ(OBSERVATIONS, ACTIONS, SMALL), TwinQ(OBSERVATIONS, ACTIONS, SMALL)
    batch = {"observations": torch.randn(64, 3), "actions": torch.rand(64, 2), "rewards": torch.randn(64),
             "next_observations": torch.randn(64, 3), "dones": (torch.rand(64) < 0.5).float()}
    alpha = torch.tensor(0.3)
    torch.manual_seed(5)
    loss = critic_loss(critic, target, actor, batch, 0.9, alpha)
    torch.manual_seed(5)
    with torch.no_grad():
        next_actions, next_log_probs = actor.sample(batch["next_observations"])
        next_q = target(batch["next_observations"], next_actions)
        assert next_q.shape == (2, 64)
        backup = batch["rewards"] + 0.9 * (1 - batch["dones"]) * (torch.minimum(next_q[0], next_q[1])
                                                                  - 0.3 * next_log_probs)
        q = critic(batch["observations"], batch["actions"])
    expected = ((q[0] - backup) ** 2).mean() + ((q[1] - backup) ** 2).mean()
    torch.testing.assert_close(loss, expected)


def test_twin_q_networks_are_independent():
    torch.manual_seed(0)
    critic = TwinQ(OBSERVATIONS, ACTIONS, SMALL)
    q = critic(torch.randn(8, 3), torch.rand(8, 2))
    q[0].sum().backward()
    for parameter in critic.parameters():
        assert parameter.grad[1].abs().sum() == 0 and parameter.grad[0].abs().sum() > 0


@pytest.mark.parametrize("entropy, direction", [(3.0, -1), (-3.0, 1)])
def test_alpha_falls_when_entropy_is_above_target_and_rises_below(entropy, direction):
    log_alpha = torch.tensor(math.log(0.2), requires_grad=True)
    optimizer = torch.optim.SGD([log_alpha], lr=0.1)
    before = log_alpha.item()
    alpha_loss(log_alpha, torch.full((16,), -entropy), target_entropy=-1.0).backward()
    optimizer.step()
    assert np.sign(log_alpha.item() - before) == direction


def test_actor_step_does_not_touch_the_critics():
    torch.manual_seed(0)
    actor, critic = SquashedGaussianActor(OBSERVATIONS, ACTIONS, SMALL), TwinQ(OBSERVATIONS, ACTIONS, SMALL)
    loss, log_probs = actor_loss(actor, critic, torch.randn(16, 3), torch.tensor(0.2))
    loss.backward()
    assert log_probs.shape == (16,)
    assert all(p.grad is not None for p in actor.parameters())


def test_config_and_discrete_actions_are_refused():
    assert ALGORITHMS["sac"] is SACConfig
    config = load_config(SAC_PENDULUM)
    assert isinstance(config.algorithm, SACConfig) and config.model.policy_hidden_sizes == (256, 256)
    cartpole = load_config(SAC_PENDULUM, ["env.id=CartPole-v1"])
    with pytest.raises(ValueError, match="continuous"):
        make_learner(cartpole, *spaces_of(cartpole))
    with pytest.raises(ValueError, match="model.kind must be mlp"):
        SquashedGaussianActor(OBSERVATIONS, ACTIONS, ModelConfig(kind="cnn"))


def _experience(config, steps: int, seed: int):
    side = make_sampling_side(config, seed)
    side.sample(steps)
    batch = side.experience.take()
    side.close()
    return batch


def test_checkpoint_round_trip_continues_identically(tmp_path):
    config = _small_config()
    learner = make_learner(config, *spaces_of(config))
    assert isinstance(learner, SACLearner) and isinstance(learner.model, SquashedGaussianActor)
    metrics = learner.update(_experience(config, 300, 1), 300)
    assert metrics["replay_size"] == 300 and learner.gradient_steps == 300 and metrics["epsilon"] == 0.0
    assert {"loss_value", "loss_policy", "entropy", "alpha", "staleness_mean"} <= metrics.keys()
    more = _experience(config, 64, 2)
    save_checkpoint(tmp_path / "checkpoint.pt", TrainingCheckpoint.of(TrainingProgress(RecentEpisodes(5)),
                                                                      learner.state_dict()))
    replay = copy.deepcopy(learner.replay)
    first = learner.update(more, 364)
    resumed = make_learner(config, *spaces_of(config))
    # Also restores the torch generator the learner samples actions with.
    resumed.load_state_dict(load_checkpoint(tmp_path / "checkpoint.pt").learner)
    resumed.replay = replay  # not checkpointed: it refills
    assert resumed.update(more, 364) == first
    for name in ("model", "critic", "critic_target"):
        for a, b in zip(getattr(learner, name).parameters(), getattr(resumed, name).parameters()):
            assert torch.equal(a, b)
    assert torch.equal(learner.log_alpha, resumed.log_alpha)


def test_policy_acts_at_random_until_learning_starts_then_in_bounds():
    config = _small_config()
    observation_space, action_space = spaces_of(config)
    actor = SquashedGaussianActor(observation_space, action_space, config.model)
    policy = SACPolicy(actor, action_space, seed=3)
    observations = np.zeros((1000, 3), np.float32)
    random = policy(observations).actions
    assert random.shape == (1000, 1) and random.std() > 1.0  # uniform on [-2, 2]: std 1.15
    policy.epsilon = 0.0
    output = policy(observations)
    assert np.all(np.abs(output.actions) <= 2.0) and np.isfinite(output.log_probs).all()
    assert output.actions.dtype == np.float32


@pytest.mark.slow
@pytest.mark.second_pass
def test_sac_learns_pendulum_in_a_few_thousand_frames():
    """Small networks, 1000 random frames, then learning: the last 5 episodes average far above
    a random policy's -1200: seeds 0, 1, 2 reach -250 by 4000 to 4400 frames, where the run stops."""
    config = load_config(SAC_PENDULUM, ["model.policy_hidden_sizes=[64,64]", "model.critic_hidden_sizes=[64,64]",
                                        "algorithm.learning_starts=1000", "stop.total_env_steps=6000",
                                        "stop.return_window=5", "stop.target_return=-250"])
    trainer = SerialTrainer(config)
    try:
        result = trainer.train()
    finally:
        trainer.close()
    assert result.recent_return_mean > -500, f"mean return {result.recent_return_mean} after {result.env_frames}"


@pytest.mark.second_pass
def test_sac_updates_with_actor_processes():
    pytest.importorskip("ray")
    from lamarckian_hpc.runtime.runners.distributed import DistributedTrainer

    reports = []

    class Collect:
        def on_update_end(self, report) -> None:
            reports.append(report)

        def on_train_end(self, result) -> None:
            pass

    config = _small_config("runtime.mode=ray", "runtime.num_actors=2", "stop.total_env_steps=1500")
    trainer = DistributedTrainer(config, [Collect()])
    try:
        result = trainer.train()
        learner = trainer.learner
    finally:
        trainer.close()
    assert result.env_frames >= 1500 and learner.version == result.updates
    assert learner.gradient_steps > 1000 and reports[-1].metrics["epsilon"] == 0.0
    assert np.isfinite(reports[-1].metrics["loss_value"])
