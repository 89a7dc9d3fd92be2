"""Golden arrays that pin the maths of two anchors: NSGA-II on ZDT1 and one PPO update.

Why: the other tests of these algorithms check properties (NSGA-II reaches ZDT1's front, PPO
learns CartPole, the batched update equals the plain one). Many wrong changes keep those
properties for a given seed: a different tie-break in survival, an advantage left unnormalised,
the clip on the wrong side, Adam's epsilon moved. Code that is moved between modules should not
change a single number, and these tests show that it did not: they run a small fixed case and
compare every number with arrays stored in tests/golden/, at tolerances far below what any change
of the maths produces (`test_*_golden_notices_*` check that they are).

The PPO case starts from parameters drawn with numpy, not from the model's own initialisation
(orthogonal, computed by LAPACK, which may differ in the last bits between machines), so it pins
the loss, the gradient clipping, Adam and the minibatch order of one update. Torch runs on one
thread on the CPU.

When a change of the maths is intended, regenerate the arrays and say so in the commit:

    PYTHONPATH=. python -m pytest tests/test_golden.py --regenerate-golden

That rewrites tests/golden/*.npz from the current code; those tests then skip, saying which file
they wrote, instead of comparing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from lamarckian_hpc.config import ModelConfig, PPOConfig
from lamarckian_hpc.ec import NSGA2, zdt
from lamarckian_hpc.models import ActorCritic
from lamarckian_hpc.rl import RolloutBatch, ppo_update
from lamarckian_hpc.rl.adam import Adam

GOLDEN = Path(__file__).resolve().parent / "golden"
#: float64 numpy on any machine agrees far closer than this; one ulp more in a genome is 1e-16.
NSGA2_TOLERANCE = {"rtol": 1e-10, "atol": 1e-12}
#: float32 torch on one thread; other CPUs' kernels may round differently in the last bits.
PPO_TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _compare_or_write(request: pytest.FixtureRequest, name: str, arrays: dict[str, np.ndarray],
                      tolerance: dict[str, float]) -> None:
    """Compare `arrays` with tests/golden/<name>.npz, or write them there with --regenerate-golden."""
    path = GOLDEN / f"{name}.npz"
    if request.config.getoption("--regenerate-golden"):
        GOLDEN.mkdir(exist_ok=True)
        np.savez(path, **arrays)
        pytest.skip(f"wrote {path.relative_to(GOLDEN.parent.parent)}; nothing compared")
    assert path.is_file(), f"no golden file {path}; make it with --regenerate-golden"
    with np.load(path) as stored:
        golden = {key: stored[key] for key in stored.files}
    assert sorted(arrays) == sorted(golden), "the arrays computed and stored differ in their names"
    for key, expected in golden.items():
        actual = arrays[key]
        assert actual.shape == expected.shape, f"{key}: shape {actual.shape}, golden {expected.shape}"
        if np.issubdtype(expected.dtype, np.integer):
            np.testing.assert_array_equal(actual, expected, err_msg=key)
        else:
            np.testing.assert_allclose(actual, expected, err_msg=key, **tolerance)


def _matches(arrays: dict[str, np.ndarray], name: str, tolerance: dict[str, float]) -> bool:
    """Whether `arrays` would pass the comparison with the stored golden file."""
    with np.load(GOLDEN / f"{name}.npz") as stored:
        return all(np.allclose(arrays[key], stored[key], **tolerance) for key in stored.files)


# --- NSGA-II on ZDT1 ---------------------------------------------------------------------------

def nsga2_zdt1(crossover_eta: float = 15.0) -> dict[str, np.ndarray]:
    """Ten generations of 20 on 30-variable ZDT1 from seed 0: the final population (genomes,
    objectives, ids, parents), in the order survival left it."""
    problem = zdt(1)
    algorithm = NSGA2(problem.lower, problem.upper, 20, np.random.default_rng(0), crossover_eta=crossover_eta)
    for _ in range(10):
        genomes = algorithm.ask()
        algorithm.tell(genomes, problem.evaluate(genomes))
    assert algorithm.genomes is not None and algorithm.objectives is not None
    return {"genomes": algorithm.genomes, "objectives": algorithm.objectives, "ids": algorithm.ids,
            "parent_ids": algorithm.parent_ids}


def test_nsga2_on_zdt1_matches_its_golden_population(request: pytest.FixtureRequest) -> None:
    _compare_or_write(request, "nsga2_zdt1", nsga2_zdt1(), NSGA2_TOLERANCE)


def test_nsga2_golden_notices_a_small_change_of_the_crossover() -> None:
    assert not _matches(nsga2_zdt1(crossover_eta=15.5), "nsga2_zdt1", NSGA2_TOLERANCE)


# --- One PPO update ----------------------------------------------------------------------------

#: Discrete actions with a critic of its own (CartPole-like), continuous ones with a shared trunk
#: (Pendulum-like): both heads and both critic layouts.
PPO_CASES = {
    "discrete": (gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(3),
                 ModelConfig(policy_hidden_sizes=(8, 8), critic_hidden_sizes=(), share_trunk=False,
                             activation="tanh")),
    "continuous": (gym.spaces.Box(-np.inf, np.inf, (3,), np.float32), gym.spaces.Box(-2.0, 2.0, (2,), np.float32),
                   ModelConfig(policy_hidden_sizes=(8,), critic_hidden_sizes=(8,), share_trunk=True,
                               activation="leaky_relu")),
}
#: Two epochs of four minibatches of 16; a gradient norm limit the first steps exceed.
PPO = PPOConfig(batch_size=64, num_epochs=2, num_minibatches=4, learning_rate=3e-3, clip_range=0.2,
                value_weight=0.5, entropy_weight=0.01, max_grad_norm=0.5)


def ppo_one_update(kind: str, config: PPOConfig = PPO) -> dict[str, np.ndarray]:
    """One `ppo_update` of a small model, from parameters and a batch drawn with numpy (seed 0):
    the log-probabilities and values before it, its loss diagnostics and every parameter after it."""
    observation_space, action_space, model_config = PPO_CASES[kind]
    model = ActorCritic(observation_space, action_space, model_config)
    rng = np.random.default_rng(0)
    with torch.no_grad():
        for _, parameter in sorted(model.named_parameters()):
            parameter.copy_(torch.from_numpy(rng.normal(0.0, 0.5, parameter.shape).astype(np.float32)))
    size = config.batch_size
    observations = torch.from_numpy(rng.normal(size=(size, *observation_space.shape)).astype(np.float32))
    if isinstance(action_space, gym.spaces.Discrete):
        actions = torch.from_numpy(rng.integers(0, int(action_space.n), size))
    else:
        actions = torch.from_numpy(rng.normal(size=(size, *action_space.shape)).astype(np.float32))
    with torch.no_grad():
        log_probs, _, values = model.evaluate(observations, actions)
    # Old log-probabilities off the current ones, so that ratios start away from 1 and some clip.
    old_log_probs = log_probs + torch.from_numpy(rng.normal(0.0, 0.3, size).astype(np.float32))
    advantages = torch.from_numpy(rng.normal(size=size).astype(np.float32))
    returns = torch.from_numpy(rng.normal(size=size).astype(np.float32))
    batch = RolloutBatch(observations, actions, old_log_probs, advantages, returns)
    optimizer = Adam(model.parameters(), lr=config.learning_rate, eps=1e-5)  # as the learner builds it
    diagnostics = ppo_update(model, optimizer, batch, config, np.random.default_rng(1))
    return {"before/log_probs": log_probs.numpy(), "before/values": values.numpy(),
            **{f"diagnostics/{name}": np.float64(value) for name, value in diagnostics.items()},
            **{f"after/{name}": parameter.detach().numpy().copy() for name, parameter in model.named_parameters()}}


@pytest.mark.parametrize("kind", sorted(PPO_CASES))
def test_one_ppo_update_matches_its_golden_parameters_and_losses(kind: str, request: pytest.FixtureRequest) -> None:
    _compare_or_write(request, f"ppo_update_{kind}", ppo_one_update(kind), PPO_TOLERANCE)


@pytest.mark.parametrize("change", [{"clip_range": 0.19}, {"normalize_advantages": False}, {"max_grad_norm": 0.45}],
                         ids=["clip_range", "unnormalized_advantages", "max_grad_norm"])
def test_ppo_golden_notices_a_small_change_of_the_update(change: dict) -> None:
    changed = PPO.model_copy(update=change)
    assert not _matches(ppo_one_update("discrete", changed), "ppo_update_discrete", PPO_TOLERANCE)
