"""A user's own Gymnasium environment by a `module:Id` env id (docs/guides/own_environment.md):
`lamarckian-hpc train`, the console script, run as a subprocess from the folder that holds
my_envs.py, trains on it serially and on a local Ray with an actor process (which imports my_envs
too); a missing or broken module ends in one line naming it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from optional_parts import require_slurm

from lamarckian_hpc.storage import open_run

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_SECONDS = 300
MY_ENVS = '''"""A corridor: step right (1) or left (0); reaching the last cell pays 1."""
import gymnasium as gym
import numpy as np


class MyCorridor(gym.Env):
    def __init__(self, length=8):
        self.length = length
        self.observation_space = gym.spaces.Box(0.0, 1.0, (length,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.position = 0

    def _observation(self):
        observation = np.zeros(self.length, np.float32)
        observation[self.position] = 1.0
        return observation

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position = 0
        return self._observation(), {}

    def step(self, action):
        self.position = min(self.length - 1, max(0, self.position + (1 if action == 1 else -1)))
        done = self.position == self.length - 1
        return self._observation(), float(done), done, False, {}


gym.register("MyCorridor-v0", entry_point=MyCorridor, max_episode_steps=50)
'''
CONFIG = """env:
  id: my_envs:MyCorridor-v0
  num_envs: 2
algorithm:
  batch_size: 256
  num_epochs: 2
stop:
  total_env_steps: 2000
"""


def console_script() -> str:
    script = shutil.which("lamarckian-hpc") or str(Path(sys.executable).with_name("lamarckian-hpc"))
    if not Path(script).is_file():
        pytest.skip("the lamarckian-hpc console script is not installed")
    return script


def run_command(folder: Path, command: list[str], *overrides: str,
                config: str = "corridor.yaml") -> subprocess.CompletedProcess[str]:
    """`lamarckian-hpc COMMAND CONFIG` with `folder` as the current folder, which is on no
    path of the process's own (PYTHONPATH names only the repository, for the package)."""
    env = {**os.environ, "PYTHONPATH": str(REPOSITORY_ROOT)}
    return subprocess.run([console_script(), *command, config, f"storage.directory={folder / 'runs'}",
                           *overrides], cwd=folder, env=env, capture_output=True, text=True, timeout=TIMEOUT_SECONDS)


def train(folder: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    return run_command(folder, ["train"], *overrides)


@pytest.fixture
def corridor(tmp_path: Path) -> Path:
    (tmp_path / "my_envs.py").write_text(MY_ENVS)
    (tmp_path / "corridor.yaml").write_text(CONFIG)
    return tmp_path


@pytest.mark.parametrize("runtime", [["runtime.mode=serial"], ["runtime.mode=ray", "runtime.num_actors=1"]],
                         ids=["serial", "ray"])
def test_an_environment_of_the_current_folder_trains(corridor, runtime):
    result = train(corridor, "storage.run_name=corridor", *runtime)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    path = corridor / "runs" / "corridor.h5"
    assert result.stdout.strip().splitlines()[-1] == str(path)
    with open_run(path) as run:
        assert run.closed_cleanly
        frames = run.metric("episode_return_mean").env_frames
        assert frames[-1] >= 2000
        assert run.config["env"]["id"] == "my_envs:MyCorridor-v0"


def test_an_environment_of_the_current_folder_trains_on_two_hosts_of_a_slurm_job(corridor):
    """The folder is shared, as a cluster's home is: the actors on the second node import my_envs
    from it through the PYTHONPATH the run gives them."""
    require_slurm(2)
    result = run_command(corridor, ["launch", "--nodes", "2", "--cpus-per-node", "1", "--time", "10",
                                    f"--folder={corridor / 'jobs'}"],
                         "storage.run_name=corridor", "runtime.mode=ray", "runtime.num_actors=2")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    with open_run(corridor / "runs" / "corridor.h5") as run:
        assert run.closed_cleanly
        assert run.metric("episode_return_mean").env_frames[-1] >= 2000
        placed = run.meta["actors_per_node"]
    assert len(placed) == 2 and set(placed.values()) == {1}, placed  # an actor on each node of the job


def assert_one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr + result.stdout, result.stderr
    return lines[0]


def test_a_missing_module_is_one_line_naming_it(corridor):
    (corridor / "my_envs.py").unlink()
    line = assert_one_line(train(corridor, "storage.run_name=missing"))
    assert line == ("error: env.id: cannot import module 'my_envs' (from my_envs:MyCorridor-v0): No module named "
                    "'my_envs'; run from the folder that holds my_envs.py or install it")
    assert not (corridor / "runs" / "missing.h5").exists()


def test_a_broken_module_is_one_line_naming_it_and_its_error(corridor):
    (corridor / "my_envs.py").write_text(MY_ENVS + "\nraise RuntimeError('corridor length unset')\n")
    line = assert_one_line(train(corridor, "storage.run_name=broken", "runtime.mode=serial"))
    assert line.startswith("error: env.id: cannot import module 'my_envs' (from my_envs:MyCorridor-v0): "
                           "RuntimeError: corridor length unset")
