"""Recorded episodes of a multi-agent run whose observations are not flat: PettingZoo's
knights_archers_zombies_v11 (each agent observes a (27, 5) array; knights and archers die, and so
leave, mid-episode) on the Ray runtime, with archers and knights mapped by name to two policies.
The run file's /trajectories keeps each step's observation in the environment's own shape, with
whole episodes (also those of agents that left early), and the storage readers and
`analysis/trajectories.py` read them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

#: One multi-agent run on Ray shared by the module's tests: half a minute on two cores.
pytestmark = pytest.mark.second_pass

ray = pytest.importorskip("ray")
pytest.importorskip("pettingzoo.butterfly.knights_archers_zombies_v11")

from trajectory_checks import assert_episodes_consistent  # noqa: E402

from lamarckian_hpc.cli import main  # noqa: E402
from lamarckian_hpc.storage import open_run  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MAX_CYCLES = 150
#: Zombies every 2 cycles, and one reaching the bottom ends the game: agents die within 150 cycles.
KAZ = {
    "seed": 0,
    "env": {"id": "pettingzoo:pettingzoo.butterfly.knights_archers_zombies_v11", "num_envs": 2,
            "kwargs": {"max_cycles": MAX_CYCLES, "spawn_delay": 2, "line_death": True}},
    "model": {"policy_hidden_sizes": [32], "critic_hidden_sizes": [32]},
    "algorithm": {"batch_size": 600, "num_epochs": 1, "num_minibatches": 2},
    "multiagent": {"policies": ["archers", "knights"],
                   "mapping": {"archer_0": "archers", "archer_1": "archers",
                               "knight_0": "knights", "knight_1": "knights"}},
    "runtime": {"mode": "ray", "num_actors": 1, "rollout_steps": 25, "device": "cpu"},
    "stop": {"total_env_steps": 3000},
    "storage": {"metrics_interval_seconds": 1, "trajectories": {"every_episodes": 3}},
}


@pytest.fixture(scope="module")
def kaz_run(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("kaz")
    config = folder / "kaz.yaml"
    config.write_text(yaml.safe_dump(KAZ))
    code = main(["train", str(config), f"storage.directory={folder}", "storage.run_name=kaz"])
    assert code == 0
    return folder / "kaz.h5"


def test_recorded_episodes_keep_the_observations_shape_and_agents_that_left(kaz_run):
    with open_run(kaz_run) as run:
        assert run.closed_cleanly
        assert run.trajectory_policies() == ["archers", "knights"]
        left_early = 0
        for policy_id, prefix in (("archers", "archer_"), ("knights", "knight_")):
            index = assert_episodes_consistent(run, policy_id)
            assert len(index["episode"]) >= 3
            for number, length in zip(index["episode"], index["length"]):
                steps = run.episode(int(number), policy_id)
                assert steps["observations"].shape == (length, 27, 5)
                assert steps["observations"].dtype == np.float32
                assert steps["actions"].shape == (length,) and steps["actions"].max() < 6
                (agent,) = set(steps["agent_id"])
                assert agent.startswith(prefix)
                # The vector observation's first row is the agent itself: its position moves.
                assert np.ptp(steps["observations"][:, 0, 1:3]) > 0
                left_early += int(steps["terminated"][-1] and length < MAX_CYCLES)
            # The reader's column read over every recorded step agrees with the episodes.
            columns = run.step_columns(("observations",), policy_id, index)
            assert columns["observations"].shape == (index["length"].sum(), 27, 5)
        assert left_early >= 1  # some recorded agent died before its environment's episode ended


def test_analysis_draws_the_recorded_episodes_of_both_policies(kaz_run, tmp_path):
    out = tmp_path / "figures"
    result = subprocess.run([sys.executable, str(ROOT / "analysis" / "trajectories.py"), str(kaz_run),
                             "--out", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    for policy_id in ("archers", "knights"):
        for figure in ("episodes", "actions", "rewards"):
            assert (out / f"{figure}_kaz_{policy_id}.png").stat().st_size > 0
    table = (out / "trajectories.csv").read_text()
    assert "archers" in table and "knights" in table
