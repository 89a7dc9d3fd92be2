"""ALE Pong through `lamarckian/PongImage-v0` and `lamarckian/PongRAM-v0`: the observations
they make, their seeding, uint8 observations from the sampler to the learner, and a few PPO
updates on image Pong through the distributed runtime.

The tests that step the ALE run whenever the `atari` extra is installed; CI installs it and sets
LAMARCKIAN_HPC_REQUIRE_ATARI=1, so there a missing ale-py fails instead of skipping.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from optional_parts import skip_unless_required

from lamarckian_hpc.envs.atari import IMAGE_ID, INSTALL_HINT, RAM_ID, atari_problem

ROOT = Path(__file__).resolve().parents[1]
IMAGE_CONFIG = ROOT / "configs" / "ppo_pong_image.yaml"
NUM_ACTIONS = 6  # Pong's minimal action set: NOOP, FIRE, RIGHT, LEFT, RIGHTFIRE, LEFTFIRE


@pytest.fixture
def ale() -> None:
    """Skip (or fail, where CI requires the part) without the atari extra."""
    problem = atari_problem()
    if problem is not None:
        skip_unless_required("atari", problem)


def _play(env_id: str, seed: int, steps: int) -> list[np.ndarray]:
    """The observations of `steps` steps from a reset with `seed`, under a fixed action sequence."""
    env = gym.make(env_id)
    try:
        actions = np.random.default_rng(0).integers(0, NUM_ACTIONS, steps)
        observation, _ = env.reset(seed=seed)
        observations = [observation]
        for action in actions:
            observation, _, terminated, truncated, _ = env.step(int(action))
            observations.append(observation)
            assert not (terminated or truncated)  # a game to 21 points lasts thousands of steps
        return observations
    finally:
        env.close()


def test_image_id_gives_four_stacked_grey_frames_as_bytes(ale):
    env = gym.make(IMAGE_ID)
    try:
        assert env.observation_space == gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
        assert env.action_space == gym.spaces.Discrete(NUM_ACTIONS)
        observation, _ = env.reset(seed=0)
        assert observation.dtype == np.uint8 and observation.shape == (4, 84, 84)
        assert env.observation_space.contains(observation)
    finally:
        env.close()


def test_frames_stack_oldest_first_and_the_newest_changes(ale):
    observations = _play(IMAGE_ID, seed=0, steps=60)
    first = observations[0]
    assert all((first[k] == first[0]).all() for k in range(4))  # a reset fills the stack with its frame
    for before, after in zip(observations, observations[1:]):
        np.testing.assert_array_equal(after[:3], before[1:])  # each step shifts the stack by one frame
    changed = sum((after[3] != before[3]).any() for before, after in zip(observations, observations[1:]))
    assert changed > 50  # the ball and the paddles move
    assert not np.shares_memory(observations[1], observations[2])  # the sampler may keep every one


@pytest.mark.parametrize("env_id", [IMAGE_ID, RAM_ID])
def test_same_seed_same_game_another_seed_another(ale, env_id):
    first, again, other = (_play(env_id, seed, steps=200) for seed in (3, 3, 4))
    np.testing.assert_array_equal(np.array(first), np.array(again))
    assert not np.array_equal(np.array(first), np.array(other))  # no-op starts and sticky actions


def test_ram_id_gives_the_consoles_128_bytes(ale):
    env = gym.make(RAM_ID)
    try:
        assert env.observation_space == gym.spaces.Box(0, 255, (128,), np.uint8)
        assert env.action_space == gym.spaces.Discrete(NUM_ACTIONS)
    finally:
        env.close()
    observations = _play(RAM_ID, seed=0, steps=50)
    assert all(observation.dtype == np.uint8 and observation.shape == (128,) for observation in observations)
    assert len({observation.tobytes() for observation in observations}) > 40


def test_experience_of_image_pong_travels_as_bytes(ale):
    """What an actor sends and the learner reads back: observations stay uint8 on the wire."""
    from lamarckian_hpc.comm import wire
    from lamarckian_hpc.config import load_config
    from lamarckian_hpc.runtime.actor.sides import make_sampling_side
    from lamarckian_hpc.runtime.messages import experience_message, read_experience

    config = load_config(IMAGE_CONFIG, ["env.num_envs=2"])
    side = make_sampling_side(config, seed=1)
    try:
        side.sample(16)
        batch = side.experience.take()
    finally:
        side.close()
    assert batch.observations.dtype == np.uint8 and batch.observations.shape == (16, 4, 84, 84)
    assert batch.bootstrap_observations.dtype == np.uint8
    message = experience_message(0, batch, np.zeros(0), np.zeros(0, np.int64), env_frames=16)
    frames = wire.encode(message)
    assert sum(memoryview(frame).nbytes for frame in frames) < 2 * batch.observations.nbytes  # bytes, not floats
    received = read_experience(wire.decode(frames)).batch
    assert received.observations.dtype == np.uint8
    np.testing.assert_array_equal(received.observations, batch.observations)


def test_a_few_ppo_updates_on_image_pong_with_two_actors(ale, tmp_path):
    """The distributed runtime end to end: a learner, two actor processes on a local Ray, CNN
    policies, and the run file it leaves behind."""
    from lamarckian_hpc.storage import open_run

    updates, batch_size = 3, 256
    done = subprocess.run(
        [sys.executable, "-m", "lamarckian_hpc", "train", str(IMAGE_CONFIG), "runtime.mode=ray",
         "runtime.num_actors=2", "env.num_envs=2", "runtime.rollout_steps=16", f"algorithm.batch_size={batch_size}",
         "algorithm.num_minibatches=2", f"stop.total_env_steps={updates * batch_size}", "runtime.device=cpu",
         f"storage.directory={tmp_path}", "storage.run_name=pong"],
        cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    with open_run(tmp_path / "pong.h5") as reader:
        assert reader.closed_cleanly
        assert reader.config["env"]["id"] == IMAGE_ID and reader.config["model"]["kind"] == "cnn"
        losses = reader.metric("loss_policy")
        assert len(losses) == updates and np.isfinite(losses.value).all()
        assert list(losses.policy_version) == list(range(1, updates + 1))
        assert reader.metric("actors_connected").last() == 2
        assert reader.summary().env_frames >= updates * batch_size


def test_without_ale_py_making_an_id_says_which_extra_to_install():
    """A fresh interpreter in which ale_py cannot be imported, as on a machine without the extra."""
    script = (
        "import importlib.abc, sys\n"
        "class Blocked(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.partition('.')[0] == 'ale_py':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Blocked())\n"
        "import lamarckian_hpc.envs  # registers the lamarckian/ ids\n"
        "from lamarckian_hpc.mdp.gym_adapter import make_gym_env\n"
        f"for env_id in {[IMAGE_ID, RAM_ID]!r}:\n"
        "    try:\n"
        "        make_gym_env(env_id)\n"
        "    except ValueError as error:\n"
        "        print(error)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [INSTALL_HINT, INSTALL_HINT]
    assert 'pip install -c constraints.txt -e ".[atari]"' in INSTALL_HINT


@pytest.mark.parametrize("algorithm", ["ppo", "dqn"])
def test_byte_observations_train_an_mlp(ale, algorithm):
    """RAM observations arrive as uint8 (never widened on the way); the MLPs take them as floats."""
    from lamarckian_hpc.config import load_config
    from lamarckian_hpc.runtime.runners.trainer import SerialTrainer

    overrides = ["runtime.mode=serial", f"env.id={RAM_ID}", "env.num_envs=2", "model.kind=mlp",
                 "stop.target_return=null", "runtime.device=cpu"]
    if algorithm == "ppo":
        overrides += ["algorithm.batch_size=64", "algorithm.num_minibatches=2", "stop.total_env_steps=128"]
    else:
        overrides += ["algorithm.name=dqn", "algorithm.learning_starts=32", "algorithm.minibatch_size=16",
                      "stop.total_env_steps=96"]
    config = load_config(None, overrides)
    trainer = SerialTrainer(config, [])
    try:
        result = trainer.train()
    finally:
        trainer.close()
    assert result.updates > 0 and result.env_frames >= 96
