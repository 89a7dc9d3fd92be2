"""BatchedPPO learns, member for member, what ppo_update learns for each member alone."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

from lamarckian_hpc.config import ModelConfig, PPOConfig
from lamarckian_hpc.mdp import MaskedDiscrete
from lamarckian_hpc.models import ActorCritic
from lamarckian_hpc.rl import RolloutBatch, ppo_update
from lamarckian_hpc.rl.adam import Adam
from lamarckian_hpc.rl.batched_ppo import BatchedPPO, batched_ppo_update
from lamarckian_hpc.rl.optim import NONFINITE_STEPS

ATOL = 1e-5
SPACES = {
    # CartPole-shaped with the PBT config's separate critic trunk; Pendulum-shaped with a shared one.
    "discrete": (gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2),
                 ModelConfig(policy_hidden_sizes=(32, 32), critic_hidden_sizes=(), share_trunk=False,
                             activation="tanh")),
    "continuous": (gym.spaces.Box(-np.inf, np.inf, (3,), np.float32), gym.spaces.Box(-2.0, 2.0, (1,), np.float32),
                   ModelConfig(policy_hidden_sizes=(32,), critic_hidden_sizes=(16,), initial_log_std=-0.5)),
    # A board game's rows: 4 features, then the legal-action mask of 3 actions.
    "masked": (gym.spaces.Box(-np.inf, np.inf, (4 + 3,), np.float32), MaskedDiscrete(3),
               ModelConfig(policy_hidden_sizes=(32,), critic_hidden_sizes=(), share_trunk=False, activation="tanh")),
}
# Members differ in every per-member setting: lr, clip range, loss weights, grad norm (0.05 clips), epochs.
MEMBERS = [
    dict(lr=3e-3, clip_range=0.2, policy_weight=1.0, value_weight=0.5, entropy_weight=0.01, max_grad_norm=0.5,
         num_epochs=3),
    dict(lr=1e-2, clip_range=0.1, policy_weight=0.7, value_weight=1.0, entropy_weight=0.0, max_grad_norm=0.05,
         num_epochs=2),
    dict(lr=5e-4, clip_range=0.3, policy_weight=1.3, value_weight=0.1, entropy_weight=0.05, max_grad_norm=10.0,
         num_epochs=4, normalize_advantages=False),
]


def _model(kind: str, seed: int) -> ActorCritic:
    torch.manual_seed(seed)
    observation_space, action_space, config = SPACES[kind]
    return ActorCritic(observation_space, action_space, config)


def _batch(model: ActorCritic, seed: int, size: int = 128) -> RolloutBatch:
    generator = torch.Generator().manual_seed(seed)
    observations = torch.randn(size, model.trunk[1][0].in_features, generator=generator)
    if model.mask_size:  # random legal actions, at least one a row
        legal = torch.rand(size, model.mask_size, generator=generator) < 0.5
        legal[:, 0] |= ~legal.any(dim=1)
        observations[:, -model.mask_size:] = legal.float()
    with torch.no_grad():
        actions, log_probs = model.act(observations)
    returns = 2.0 * observations[:, 0] + 0.1 * torch.randn(size, generator=generator)
    return RolloutBatch(observations, actions, log_probs, torch.randn(size, generator=generator), returns)


def _member(kind: str, slot: int, settings: dict) -> tuple[ActorCritic, Adam, PPOConfig, RolloutBatch]:
    settings = dict(settings)
    lr = settings.pop("lr")
    model = _model(kind, 10 + slot)
    config = PPOConfig(batch_size=128, num_minibatches=4, learning_rate=lr, **settings)
    return model, Adam(model.parameters(), lr=lr, eps=1e-5), config, _batch(model, 100 + slot)


def _copies(members: list) -> tuple[list[ActorCritic], list[Adam]]:
    models = [copy.deepcopy(model) for model, *_ in members]
    optimizers = []
    for model, (_, optimizer, _, _) in zip(models, members):
        ours = Adam(model.parameters(), lr=optimizer.param_groups[0]["lr"], eps=1e-5)
        ours.load_state_dict(optimizer.state_dict())
        optimizers.append(ours)
    return models, optimizers


def _max_difference(model_a: ActorCritic, optimizer_a: Adam, model_b: ActorCritic, optimizer_b: Adam) -> float:
    state_a, state_b = optimizer_a.state_dict()["state"], optimizer_b.state_dict()["state"]
    assert state_a.keys() == state_b.keys()
    differences = [float((a - b).detach().abs().max()) for a, b in zip(model_a.parameters(), model_b.parameters())]
    for index in state_a:
        assert float(state_a[index]["step"]) == float(state_b[index]["step"])
        differences += [float((state_a[index][k] - state_b[index][k]).abs().max()) for k in ("exp_avg", "exp_avg_sq")]
    return max(differences, default=0.0)


@pytest.mark.parametrize("kind,count", [(kind, count) for kind in ("discrete", "continuous") for count in (1, 3)]
                         + [("masked", 2)])
def test_batched_update_equals_member_by_member_ppo_update(kind: str, count: int) -> None:
    members = [_member(kind, slot, MEMBERS[slot]) for slot in range(count)]
    models, optimizers = _copies(members)
    configs = [config for _, _, config, _ in members]
    batched = BatchedPPO(models, optimizers, configs)
    rngs = [np.random.default_rng(slot) for slot in range(count)]
    reference_rngs = [np.random.default_rng(slot) for slot in range(count)]
    for _ in range(2):  # the second update continues from the stack, with Adam moments already there
        expected = [ppo_update(model, optimizer, batch, config, rng)
                    for (model, optimizer, config, batch), rng in zip(members, reference_rngs)]
        got = batched.update([batch for *_, batch in members], rngs)
        for a, b in zip(expected, got):
            assert a.keys() == b.keys() and b[NONFINITE_STEPS] == 0
            assert all(b[k] == pytest.approx(a[k], rel=1e-4, abs=1e-6) for k in a)
    batched.write_back()
    worst = max(_max_difference(m, o, a, b) for (m, o, _, _), a, b in zip(members, models, optimizers))
    assert worst < ATOL
    # Built again from the written-back members (moments loaded), a third update still agrees.
    for (model, optimizer, config, batch), rng in zip(members, reference_rngs):
        ppo_update(model, optimizer, batch, config, rng)
    batched_ppo_update(models, optimizers, [batch for *_, batch in members], configs, rngs)
    assert max(_max_difference(m, o, a, b) for (m, o, _, _), a, b in zip(members, models, optimizers)) < ATOL
    assert not torch.equal(next(models[0].parameters()), next(_model(kind, 10).parameters()))


def test_a_member_with_nonfinite_batches_skips_while_the_others_learn() -> None:
    members = [_member("discrete", slot, MEMBERS[slot]) for slot in range(3)]
    _, _, _, batch = members[1]
    poisoned = batch.advantages.clone()
    poisoned[5] = float("nan")  # one row: only the minibatches that hold it are skipped
    members[1] = (*members[1][:3], RolloutBatch(*batch[:3], poisoned, batch.returns))
    _, _, _, batch = members[2]
    members[2] = (*members[2][:3], RolloutBatch(*batch[:4], torch.full_like(batch.returns, float("inf"))))
    models, optimizers = _copies(members)
    before = [p.detach().clone() for p in models[2].parameters()]
    got = batched_ppo_update(models, optimizers, [b for *_, b in members], [c for _, _, c, _ in members],
                             [np.random.default_rng(slot) for slot in range(3)])
    expected = [ppo_update(model, optimizer, batch, config, np.random.default_rng(slot))
                for slot, (model, optimizer, config, batch) in enumerate(members)]
    assert [d[NONFINITE_STEPS] for d in got] == [d[NONFINITE_STEPS] for d in expected] == [0.0, 2.0, 16.0]
    assert "loss_policy" not in got[2] and np.isfinite(got[1]["loss_policy"])
    for (model, optimizer, _, _), ours, our_optimizer in zip(members, models, optimizers):
        assert _max_difference(model, optimizer, ours, our_optimizer) < ATOL
    assert all(torch.equal(a, b) for a, b in zip(before, models[2].parameters()))
    assert not optimizers[2].state  # its moments never saw the infinity
    assert all(torch.isfinite(p).all() for model in models for p in model.parameters())


def test_members_that_cannot_be_batched_raise() -> None:
    members = [_member("discrete", slot, MEMBERS[0]) for slot in range(2)]
    models, optimizers = _copies(members)
    configs = [config for _, _, config, _ in members]
    batched = BatchedPPO(models, optimizers, configs)
    rngs = [np.random.default_rng(0), np.random.default_rng(1)]
    batch = members[0][3]
    short = RolloutBatch(*(field[:64] for field in batch))
    with pytest.raises(ValueError, match="equal batch sizes"):
        batched.update([batch, short], rngs)
    with pytest.raises(ValueError, match="equal minibatch sizes"):
        batched.update([batch, batch], rngs, [configs[0], configs[1].model_copy(update={"num_minibatches": 2})])
    other = _model("continuous", 0)
    with pytest.raises(ValueError, match="architecture"):
        BatchedPPO([models[0], other], [optimizers[0], Adam(other.parameters())], configs)
    with pytest.raises(ValueError, match="parameters are not its model's"):
        BatchedPPO(models, [optimizers[1], optimizers[0]], configs)


def test_an_encoder_without_a_batched_layer_falls_back_to_vmap() -> None:
    """The CNN trunk has no hand-batched layers: it runs under vmap and still learns as ppo_update does."""
    observation_space = gym.spaces.Box(0, 255, (16, 16, 2), np.uint8)
    members = []
    for slot in range(2):
        torch.manual_seed(slot)
        model = ActorCritic(observation_space, gym.spaces.Discrete(3), ModelConfig(kind="cnn", critic_hidden_sizes=()))
        generator = torch.Generator().manual_seed(slot)
        observations = torch.randint(0, 256, (16, 16, 16, 2), generator=generator, dtype=torch.uint8)
        with torch.no_grad():
            actions, log_probs = model.act(observations)
        batch = RolloutBatch(observations, actions, log_probs, torch.randn(16, generator=generator),
                             torch.randn(16, generator=generator))
        config = PPOConfig(batch_size=16, num_minibatches=2, num_epochs=2, max_grad_norm=0.1 + slot)
        members.append((model, Adam(model.parameters(), lr=1e-3 * (slot + 1), eps=1e-5), config, batch))
    models, optimizers = _copies(members)
    batched_ppo_update(models, optimizers, [b for *_, b in members], [c for _, _, c, _ in members],
                       [np.random.default_rng(slot) for slot in range(2)])
    for slot, (model, optimizer, config, batch) in enumerate(members):
        ppo_update(model, optimizer, batch, config, np.random.default_rng(slot))
        assert _max_difference(model, optimizer, models[slot], optimizers[slot]) < ATOL
