"""PPO's pieces against values worked out by hand, and the action heads against torch.distributions."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from lamarckian_hpc.config import ModelConfig, PPOConfig
from lamarckian_hpc.models import ActorCritic, CategoricalHead, GaussianHead
from lamarckian_hpc.rl import (
    RolloutBatch,
    clipped_policy_loss,
    generalized_advantages,
    next_values_of_fragments,
    ppo_loss,
    ppo_update,
    value_loss,
)


def test_gae_matches_hand_computation_for_one_terminal_fragment():
    rewards = np.array([1.0, 1.0, 1.0])
    values = np.array([0.5, 0.4, 0.3])
    next_values = np.array([0.4, 0.3, 0.0])  # the last step is terminal
    ends = np.array([False, False, True])
    advantages = generalized_advantages(rewards, values, next_values, ends, gamma=0.9, gae_lambda=0.8)
    # delta = (0.86, 0.87, 0.7); A2 = 0.7; A1 = 0.87 + 0.72 * 0.7; A0 = 0.86 + 0.72 * A1
    a2 = 0.7
    a1 = 0.87 + 0.72 * a2
    a0 = 0.86 + 0.72 * a1
    np.testing.assert_allclose(advantages, [a0, a1, a2], rtol=1e-6)


def test_gae_does_not_leak_across_fragment_boundaries():
    rewards = np.array([1.0, 0.0, 2.0])
    values = np.zeros(3)
    next_values = np.array([5.0, 0.0, 0.0])  # fragment 1 is cut with bootstrap 5; fragment 2 ends terminal
    ends = np.array([True, False, True])
    advantages = generalized_advantages(rewards, values, next_values, ends, gamma=0.5, gae_lambda=1.0)
    # Fragment 1: 1 + 0.5 * 5 = 3.5. Fragment 2: A2 = 2, A1 = 0 + 0.5 * 2 = 1.
    np.testing.assert_allclose(advantages, [3.5, 1.0, 2.0])


def test_next_values_shift_inside_fragments_and_bootstrap_at_their_ends():
    values = np.array([1.0, 2.0, 3.0, 4.0, 5.0], dtype=np.float32)
    next_values, ends = next_values_of_fragments(
        values, lengths=np.array([2, 3]), bootstrap_values=np.array([10.0, 20.0], dtype=np.float32),
        terminated=np.array([False, True]),
    )
    np.testing.assert_allclose(next_values, [2.0, 10.0, 4.0, 5.0, 0.0])
    assert ends.tolist() == [False, True, False, False, True]


def test_clipped_policy_loss_matches_hand_computation():
    log_probs = torch.log(torch.tensor([0.5, 0.2]))
    old_log_probs = torch.log(torch.tensor([0.25, 0.4]))  # ratios 2.0 and 0.5
    # advantages (1, -1): min(2, 1.2) = 1.2 and min(-0.5, -0.8) = -0.8 -> loss -0.2
    loss = clipped_policy_loss(log_probs, old_log_probs, torch.tensor([1.0, -1.0]), clip_range=0.2)
    assert float(loss) == pytest.approx(-0.2, abs=1e-6)
    # advantages (-1, 1): min(-2, -1.2) = -2 and min(0.5, 0.8) = 0.5 -> loss 0.75
    loss = clipped_policy_loss(log_probs, old_log_probs, torch.tensor([-1.0, 1.0]), clip_range=0.2)
    assert float(loss) == pytest.approx(0.75, abs=1e-6)


def test_value_loss_is_half_mean_squared_error():
    assert float(value_loss(torch.tensor([1.0, 3.0]), torch.tensor([2.0, 1.0]))) == pytest.approx(1.25)


def _cartpole_model(seed: int = 0) -> ActorCritic:
    torch.manual_seed(seed)
    env = gym.make("CartPole-v1")
    return ActorCritic(env.observation_space, env.action_space, ModelConfig(policy_hidden_sizes=(16,), critic_hidden_sizes=(8,)))


def _random_batch(model: ActorCritic, size: int = 64) -> RolloutBatch:
    generator = torch.Generator().manual_seed(1)
    observations = torch.randn(size, 4, generator=generator)
    with torch.no_grad():
        actions, log_probs = model.act(observations)
    returns = 2.0 * observations[:, 0]  # a target the critic can fit
    return RolloutBatch(observations, actions, log_probs, torch.randn(size, generator=generator), returns)


def test_ppo_loss_is_the_weighted_sum_of_its_parts():
    model = _cartpole_model()
    batch = _random_batch(model)
    config = PPOConfig(policy_weight=0.7, value_weight=0.3, entropy_weight=0.05, normalize_advantages=False)
    total, parts = ppo_loss(model, batch, config)
    total, parts = total.detach(), {name: value.detach() for name, value in parts.items()}
    expected = 0.7 * parts["loss_policy"] + 0.3 * parts["loss_value"] - 0.05 * parts["entropy"]
    assert float(total) == pytest.approx(float(expected), rel=1e-6)
    # On the sampling policy itself the ratio is 1: nothing is clipped and the KL estimate is 0.
    assert float(parts["clip_fraction"]) == 0.0
    assert float(parts["approx_kl"]) == pytest.approx(0.0, abs=1e-6)
    assert float(parts["loss_policy"]) == pytest.approx(-float(batch.advantages.mean()), rel=1e-5)


def test_ppo_update_lowers_the_loss_on_its_batch():
    model = _cartpole_model()
    batch = _random_batch(model, 256)
    config = PPOConfig(batch_size=256, num_minibatches=4, num_epochs=8, learning_rate=3e-3, entropy_weight=0.0)
    before = float(ppo_loss(model, batch, config)[1]["loss_value"].detach())
    diagnostics = ppo_update(model, torch.optim.Adam(model.parameters(), lr=3e-3), batch, config, np.random.default_rng(0))
    after = float(ppo_loss(model, batch, config)[1]["loss_value"].detach())
    assert after < 0.5 * before
    assert set(diagnostics) >= {"loss_policy", "loss_value", "entropy", "approx_kl", "clip_fraction"}


def test_categorical_head_agrees_with_torch_distributions():
    torch.manual_seed(0)
    head = CategoricalHead(5, 3)
    features = torch.randn(10, 5)
    actions, log_probs = head.sample(features)
    reference = torch.distributions.Categorical(logits=head.logits(features))
    torch.testing.assert_close(log_probs, reference.log_prob(actions))
    chosen, entropy = head.log_prob_entropy(features, actions)
    torch.testing.assert_close(chosen, reference.log_prob(actions))
    torch.testing.assert_close(entropy, reference.entropy())


def test_gaussian_head_agrees_with_torch_distributions():
    torch.manual_seed(0)
    head = GaussianHead(5, 2, initial_log_std=-0.5)
    features = torch.randn(10, 5)
    actions, log_probs = head.sample(features)
    reference = torch.distributions.Normal(head.mean(features), head.log_std.exp())
    torch.testing.assert_close(log_probs, reference.log_prob(actions).sum(-1))
    chosen, entropy = head.log_prob_entropy(features, actions)
    torch.testing.assert_close(chosen, reference.log_prob(actions).sum(-1))
    torch.testing.assert_close(entropy, reference.entropy().sum(-1))
    assert math.isclose(float(head.log_std.detach().exp()[0]), math.exp(-0.5), rel_tol=1e-6)


def test_pendulum_model_follows_table_three():
    env = gym.make("Pendulum-v1")
    model = ActorCritic(env.observation_space, env.action_space, ModelConfig())
    linear_sizes = [m.out_features for m in model.trunk.modules() if isinstance(m, torch.nn.Linear)]
    assert linear_sizes == [256, 128]
    critic_sizes = [m.out_features for m in model.critic.modules() if isinstance(m, torch.nn.Linear)]
    assert critic_sizes == [128, 64, 1]  # on top of the shared (256, 128): FC(256, 128, 128, 64)
    assert any(isinstance(m, torch.nn.LeakyReLU) for m in model.modules())


def test_cnn_model_accepts_stacked_frames():
    space = gym.spaces.Box(0, 255, shape=(84, 84, 4), dtype=np.uint8)
    model = ActorCritic(space, gym.spaces.Discrete(6), ModelConfig(kind="cnn", critic_hidden_sizes=()))
    images = torch.randint(0, 256, (3, 84, 84, 4)).float()
    actions, log_probs = model.act(images)
    assert actions.shape == (3,) and log_probs.shape == (3,)
    assert model.value(images).shape == (3,)


@pytest.mark.parametrize("layers, convolutions, feature_size", [
    ("table3", [(32, 4, 2), (64, 4, 2), (64, 4, 2), (64, 4, 2)], 256),
    ("nature", [(32, 8, 4), (64, 4, 2), (64, 3, 1)], 512),
])
def test_cnn_layers_pick_the_papers_stack_or_dqns(layers, convolutions, feature_size):
    space = gym.spaces.Box(0, 255, shape=(4, 84, 84), dtype=np.uint8)
    model = ActorCritic(space, gym.spaces.Discrete(6), ModelConfig(kind="cnn", cnn_layers=layers, critic_hidden_sizes=()))
    found = [(m.out_channels, m.kernel_size[0], m.stride[0]) for m in model.trunk.modules()
             if isinstance(m, torch.nn.Conv2d)]
    assert found == convolutions and model.trunk.output_size == feature_size
    images = torch.randint(0, 256, (2, 4, 84, 84)).float()
    assert model.act(images)[0].shape == (2,) and model.value(images).shape == (2,)


def test_a_bfloat16_cnn_computes_close_to_float32_and_keeps_float32_weights_and_gradients():
    space = gym.spaces.Box(0, 255, shape=(84, 84, 4), dtype=np.uint8)
    models = {}
    for precision in ("float32", "bfloat16"):
        torch.manual_seed(0)
        models[precision] = ActorCritic(space, gym.spaces.Discrete(6), ModelConfig(
            kind="cnn", cnn_layers="nature", cnn_precision=precision, critic_hidden_sizes=()))
    images = torch.randint(0, 256, (200, 84, 84, 4), generator=torch.Generator().manual_seed(1)).float()
    actions = torch.randint(0, 6, (200,), generator=torch.Generator().manual_seed(2))
    full, low = (models[precision].evaluate(images, actions) for precision in ("float32", "bfloat16"))
    for exact, approximate in zip(full, low):
        assert approximate.dtype == torch.float32  # the heads and the loss see float32
        assert not torch.equal(exact, approximate)  # the products really ran in bfloat16 (8 bits of mantissa)
        torch.testing.assert_close(approximate, exact, atol=0.03, rtol=0.03)
    log_probs, _, values = low
    (values.square().mean() - log_probs.mean()).backward()
    parameters = list(models["bfloat16"].parameters())
    assert all(p.dtype == torch.float32 and p.grad is not None and p.grad.dtype == torch.float32 for p in parameters)
    assert all(torch.isfinite(p.grad).all() for p in parameters)


def test_an_unknown_cnn_precision_names_the_field_and_the_choices():
    with pytest.raises(ValueError, match="cnn_precision") as error:
        ModelConfig(kind="cnn", cnn_precision="float16")
    assert "float32" in str(error.value) and "bfloat16" in str(error.value)


def test_an_unknown_cnn_stack_names_the_field_and_the_choices():
    with pytest.raises(ValueError, match="cnn_layers") as error:
        ModelConfig(kind="cnn", cnn_layers="resnet")
    assert "table3" in str(error.value) and "nature" in str(error.value)


def test_vtrace_on_policy_without_clipping_gives_discounted_returns():
    from lamarckian_hpc.rl.vtrace import vtrace

    rewards = np.array([1.0, 2.0, 3.0])
    values = np.array([0.5, 0.5, 0.5])
    log_probs = np.log(np.array([0.3, 0.6, 0.9]))
    next_values = np.array([0.5, 0.5, 4.0])  # cut after the third step, bootstrap 4
    ends = np.array([False, False, True])
    vs, advantages = vtrace(log_probs, log_probs, rewards, values, next_values, ends, gamma=0.5)
    # On-policy with c = rho = 1 the targets are n-step returns: vs_2 = 3 + 0.5 * 4 = 5, vs_1 = 2 + 0.5 * 5, ...
    np.testing.assert_allclose(vs, [1 + 0.5 * 4.5, 4.5, 5.0], rtol=1e-6)
    np.testing.assert_allclose(advantages, [1 + 0.5 * 4.5 - 0.5, 2 + 0.5 * 5 - 0.5, 3 + 0.5 * 4 - 0.5], rtol=1e-6)


def test_vtrace_clips_importance_weights():
    from lamarckian_hpc.rl.vtrace import vtrace

    # The target policy likes the action 4x more than the behaviour policy did: rho is clipped to 1.
    vs, advantages = vtrace(np.log([0.1]), np.log([0.4]), np.array([1.0]), np.array([0.0]), np.array([0.0]),
                            np.array([True]), gamma=0.9, rho_bar=1.0)
    np.testing.assert_allclose(vs, [1.0])
    # ... and with rho_bar 10 the full ratio 4 weighs the TD error.
    vs, advantages = vtrace(np.log([0.1]), np.log([0.4]), np.array([1.0]), np.array([0.0]), np.array([0.0]),
                            np.array([True]), gamma=0.9, rho_bar=10.0)
    np.testing.assert_allclose(vs, [4.0], rtol=1e-6)
    np.testing.assert_allclose(advantages, [4.0], rtol=1e-6)


def test_replay_transitions_link_steps_and_bootstraps():
    from lamarckian_hpc.mdp import ExperienceBatch
    from lamarckian_hpc.rl.replay import ReplayBuffer, transitions_of

    observations = np.arange(5, dtype=np.float32).reshape(5, 1)
    batch = ExperienceBatch(observations, np.array([0, 1, 0, 1, 0]), np.zeros(5, np.float32),
                            np.ones(5, np.float32), np.zeros(5, np.int64), lengths=np.array([2, 3]),
                            terminated=np.array([True, False]),
                            bootstrap_observations=np.array([[10.0], [20.0]], np.float32))
    transitions = transitions_of(batch)
    np.testing.assert_array_equal(transitions["next_observations"][:, 0], [1, 10, 3, 4, 20])
    np.testing.assert_array_equal(transitions["dones"], [0, 1, 0, 0, 0])
    replay = ReplayBuffer(capacity=4)
    replay.add(transitions)
    assert replay.size == 4  # the oldest transition was overwritten
    assert set(replay.arrays["observations"][:, 0]) == {1.0, 2.0, 3.0, 4.0}
    sample = replay.sample(8, np.random.default_rng(0))
    assert sample["observations"].shape == (8, 1)


def test_dqn_loss_matches_hand_computed_double_q_target():
    from lamarckian_hpc.rl.dqn import dqn_loss, linear_epsilon

    class Table(torch.nn.Module):
        """Q(s, .) read from a table by the integer state in the observation."""

        def __init__(self, table):
            super().__init__()
            self.table = torch.tensor(table)

        def forward(self, observations):
            return self.table[observations[:, 0].long()]

    online = Table([[1.0, 2.0], [3.0, 5.0]])
    target = Table([[0.0, 0.0], [7.0, 4.0]])
    batch = {"observations": torch.tensor([[0.0]]), "actions": torch.tensor([1]), "rewards": torch.tensor([1.0]),
             "next_observations": torch.tensor([[1.0]]), "dones": torch.tensor([0.0])}
    # Double Q: the online net picks action 1 in state 1, the target net values it 4: target 1 + 0.5 * 4 = 3.
    assert float(dqn_loss(online, target, batch, gamma=0.5, double_q=True)) == pytest.approx(0.5 * (3 - 2) ** 2)
    # Plain max: target 1 + 0.5 * 7 = 4.5, error 2.5 > 1 so Huber is linear: 2.5 - 0.5.
    assert float(dqn_loss(online, target, batch, gamma=0.5, double_q=False)) == pytest.approx(2.0)
    assert linear_epsilon(0, 1.0, 0.1, 100) == 1.0
    assert linear_epsilon(50, 1.0, 0.1, 100) == pytest.approx(0.55)
    assert linear_epsilon(500, 1.0, 0.1, 100) == pytest.approx(0.1)


def test_a3c_gradients_cover_every_parameter():
    from lamarckian_hpc.config import A3CConfig
    from lamarckian_hpc.mdp import ExperienceBatch
    from lamarckian_hpc.rl.a3c import a3c_gradients

    model = _cartpole_model()
    observations = torch.randn(6, 4).numpy()
    with torch.no_grad():
        actions, log_probs = model.act(torch.from_numpy(observations))
    batch = ExperienceBatch(observations, actions.numpy(), log_probs.numpy(), np.ones(6, np.float32),
                            np.zeros(6, np.int64), np.array([6]), np.array([True]), observations[-1:])
    gradients, diagnostics = a3c_gradients(model, batch, A3CConfig())
    shapes = [tuple(p.shape) for p in model.parameters()]
    assert [g.shape for g in gradients] == shapes
    assert any(np.abs(g).sum() > 0 for g in gradients)
    assert set(diagnostics) == {"loss_policy", "loss_value", "entropy"}


def test_a_nonfinite_loss_skips_its_step_and_is_counted():
    """A NaN reward in one batch leaves the parameters and the optimizer untouched; the next good
    batch updates them as usual."""
    from lamarckian_hpc.rl.optim import NONFINITE_STEPS

    model = _cartpole_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    config = PPOConfig(batch_size=16, num_minibatches=2, num_epochs=2)
    rng = np.random.default_rng(0)

    def batch(reward: float) -> RolloutBatch:
        good = _random_batch(model, 16)
        return RolloutBatch(good.observations, good.actions, good.old_log_probs, torch.full((16,), reward),
                            torch.full((16,), reward))

    before = [p.detach().clone() for p in model.parameters()]
    diagnostics = ppo_update(model, optimizer, batch(float("nan")), config, rng)
    assert diagnostics[NONFINITE_STEPS] == 4  # 2 epochs x 2 minibatches, all skipped
    assert "loss_policy" not in diagnostics
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert not optimizer.state  # Adam's moments never saw the NaN

    diagnostics = ppo_update(model, optimizer, batch(1.0), config, rng)
    assert diagnostics[NONFINITE_STEPS] == 0 and np.isfinite(diagnostics["loss_policy"])
    assert not all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_adam_steps_exactly_as_torch_adam_and_shares_its_state_layout():
    """The learners' Adam gives bitwise the parameters torch.optim.Adam gives, and a state saved by
    either continues in the other (checkpoints written before the change still load)."""
    from lamarckian_hpc.rl.adam import Adam

    def trained(optimizer_class: type, steps: int, model: ActorCritic | None = None, state: dict | None = None):
        model = model or _cartpole_model()
        optimizer = optimizer_class(model.parameters(), lr=3e-3, eps=1e-5)
        if state is not None:
            optimizer.load_state_dict(state)
        batch = _random_batch(model)
        for _ in range(steps):
            optimizer.zero_grad(set_to_none=True)
            ppo_loss(model, batch, PPOConfig())[0].backward()
            optimizer.step()
        return model, optimizer

    reference, reference_optimizer = trained(torch.optim.Adam, 30)
    ours, our_optimizer = trained(Adam, 30)
    assert all(torch.equal(a, b) for a, b in zip(reference.parameters(), ours.parameters()))
    assert our_optimizer.state_dict()["state"].keys() == reference_optimizer.state_dict()["state"].keys()

    def continued(optimizer_class: type, source: ActorCritic, state: dict) -> ActorCritic:
        model = _cartpole_model()
        model.load_state_dict(source.state_dict())
        return trained(optimizer_class, 5, model, state)[0]

    torch_then_ours = continued(Adam, reference, reference_optimizer.state_dict())
    ours_then_torch = continued(torch.optim.Adam, ours, our_optimizer.state_dict())
    torch_only = continued(torch.optim.Adam, reference, reference_optimizer.state_dict())
    for a, b, c in zip(torch_only.parameters(), torch_then_ours.parameters(), ours_then_torch.parameters()):
        assert torch.equal(a, b) and torch.equal(a, c)
    assert not torch.equal(next(torch_only.parameters()), next(reference.parameters()))
