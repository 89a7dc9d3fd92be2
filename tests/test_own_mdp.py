"""The guide to a native asynchronous game (docs/guides/own_mdp.md) works as written: its module
and config, copied out of the page into a folder, train from that folder with `lamarckian-hpc
train` on a local Ray, players joining mid-episode included, and the shared policy learns."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_own_environment import run_command

from lamarckian_hpc.storage import open_run

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guides" / "own_mdp.md"
#: a player answering at random earns a third of its turns: (100 + 33 + 40) / 3 / 3 on average
RANDOM_RETURN = 19.2


def guide_block(language: str) -> str:
    blocks = re.findall(rf"```{language}\n(.*?)```", GUIDE.read_text(), re.S)
    assert len(blocks) == 1, f"the guide should hold one {language} block"
    return blocks[0]


@pytest.mark.second_pass  # over 15 s on two cores
def test_the_guides_game_trains_from_its_folder_and_learns(tmp_path):
    (tmp_path / "my_game.py").write_text(guide_block("python"))
    (tmp_path / "light.yaml").write_text(guide_block("yaml"))
    result = run_command(tmp_path, ["train"], "storage.run_name=light", "runtime.num_actors=1",
                         "stop.total_env_steps=12000", "storage.trajectories.every_episodes=1", config="light.yaml")
    assert result.returncode == 0, result.stderr[-3000:]
    with open_run(tmp_path / "runs" / "light.h5") as run:
        assert run.closed_cleanly
        returns = run.metric("episode_return_mean").value
        lengths = set(run.episodes("shared")["length"].tolist())
    # turns per episode: the fast player's 100, the slow one's 33 and its truncated last, the
    # latecomer's 40 from tick 22: every kind of player, the one that joined mid-episode included
    assert lengths == {100, 34, 40}
    assert returns[-1] > RANDOM_RETURN + 10, returns  # measured: 46.5 and 47.8 at 12,000 frames
