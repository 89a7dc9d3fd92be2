"""An environment that raises mid-episode costs that episode, not the run: the sampler drops the
episode's steps, counts the failure and starts a new episode; training goes on and reports it."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from lamarckian_hpc.config import load_config
from lamarckian_hpc.mdp import GymMDP, PolicyOutput, Sampler, TrainingController
from lamarckian_hpc.mdp.experience import ExperienceBuffer
from lamarckian_hpc.mdp.fault_injection import FAULTY_ENV_ID, FaultyEnv, InjectedEnvError
from lamarckian_hpc.runtime.runners.trainer import SerialTrainer

ROOT = Path(__file__).resolve().parents[1]
EPISODE_LENGTH = 6


class ShortEpisodes(gym.Env):
    """Episodes of exactly six steps with reward 1 each; every second episode raises at its fourth step."""

    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.episodes = self.t = 0

    def reset(self, *, seed=None, options=None):
        self.episodes += 1
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        if self.episodes % 2 == 0 and self.t == 4:
            raise InjectedEnvError("the server crashed")
        return np.full(2, self.t / 10, np.float32), 1.0, self.t == EPISODE_LENGTH, False, {}


def _first_action(observations: np.ndarray) -> PolicyOutput:
    return PolicyOutput(np.zeros(len(observations), np.int64), np.zeros(len(observations), np.float32))


def test_failed_episode_is_dropped_counted_and_followed_by_a_new_one():
    experience = ExperienceBuffer()
    sampler = Sampler([GymMDP(ShortEpisodes()), GymMDP(ShortEpisodes())],
                      lambda index, agent: TrainingController("p", experience), {"p": _first_action})
    sampler.run_until(lambda: len(sampler.completed) >= 10)
    assert sampler.env_errors >= 8  # every second episode of each environment failed
    assert all(result.length == EPISODE_LENGTH and result.episode_return == EPISODE_LENGTH
               for result in sampler.completed)
    batch = experience.take()
    # Only whole, successful episodes (and the steps of the ones still running) are in the batch:
    # none of the three steps before each failure survived.
    finished = batch.lengths[batch.terminated]
    assert np.all(finished == EPISODE_LENGTH)
    assert len(batch) == EPISODE_LENGTH * len(finished) + int(batch.lengths[~batch.terminated].sum())
    assert len(finished) == len(sampler.completed)
    # The three steps each failed episode ran before failing were simulated: they count as frames.
    assert sampler.env_frames == len(batch) + 3 * sampler.env_errors


def test_fault_injection_is_seeded_and_rate_checked():
    def failures(seed: int) -> list[int]:
        env = FaultyEnv("CartPole-v1", error_rate=0.2, seed=seed)
        env.reset(seed=seed)
        failed = []
        for step in range(200):
            try:
                _, _, terminated, truncated, _ = env.step(0)
            except InjectedEnvError:
                failed.append(step)
                env.reset()
                continue
            if terminated or truncated:
                env.reset()
        return failed

    assert failures(3) == failures(3) and 20 < len(failures(3)) < 60
    with pytest.raises(ValueError, match="error_rate"):
        FaultyEnv("CartPole-v1", error_rate=1.5)


def test_training_survives_an_environment_that_raises_at_one_percent_of_steps():
    config = load_config(ROOT / "configs" / "ppo_cartpole.yaml", [
        "runtime.mode=serial", f"env.id={FAULTY_ENV_ID}", "env.kwargs={env_id: CartPole-v1, error_rate: 0.01}",
        "stop.total_env_steps=40000", "stop.target_return=100"])
    trainer = SerialTrainer(config)
    reports = []
    trainer.observers.append(type("Log", (), {"on_update_end": lambda self, r: reports.append(r),
                                              "on_train_end": lambda self, r: None})())
    try:
        result = trainer.train()
    finally:
        trainer.close()
    errors = reports[-1].metrics["env_errors"]
    assert errors >= 0.005 * result.env_frames, "failures were injected and counted"
    # A random policy averages about 22; the learner keeps learning from the episodes that ran.
    assert result.recent_return_mean is not None and result.recent_return_mean >= 60


@pytest.mark.parametrize("mode", ["serial", pytest.param("ray", marks=pytest.mark.second_pass)])  # ray: 20 s
def test_an_environment_that_always_raises_ends_the_run_with_its_error(tmp_path, mode):
    """No episode can finish: sampling stops after max_consecutive_env_errors, and the run ends
    with exit 1 and one line that names the environment's error, instead of waiting for ever."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "lamarckian_hpc", "train", "configs/ppo_cartpole.yaml", f"runtime.mode={mode}",
         "runtime.num_actors=2", "env.id=lamarckian/Faulty-v0", "env.kwargs={env_id: CartPole-v1, error_rate: 1.0}",
         "runtime.max_consecutive_env_errors=40", "stop.max_wall_seconds=600", f"storage.directory={tmp_path}"],
        cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=240)
    assert done.returncode == 1, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr[-3000:]
    assert "InjectedEnvError: injected environment failure" in errors[0], errors[0]
    assert "runtime.max_consecutive_env_errors=40" in errors[0], errors[0]
    if mode == "ray":
        assert "no actor can sample" in errors[0], errors[0]
