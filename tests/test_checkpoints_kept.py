"""Kept checkpoints: a short real training run leaves `<run>.ckpt` (the newest), the newest k as
`<run>.checkpoints/v<version>.ckpt` and the best-scoring one as `<run>.checkpoints/best.ckpt`, and
`--resume --checkpoint best` continues from the best one."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from lamarckian_hpc import library
from lamarckian_hpc.cli import main
from lamarckian_hpc.config import ConfigError
from lamarckian_hpc.runtime.learner.checkpoint import (
    best_checkpoint_path,
    checkpoint_path,
    checkpoint_score,
    load_checkpoint,
    versioned_checkpoints,
)
from lamarckian_hpc.storage import open_run

ROOT = Path(__file__).resolve().parents[1]
KEEP = 3
TINY = ["runtime.mode=serial", "env.num_envs=4", "stop.total_env_steps=4096", "stop.target_return=null",
        "stop.return_window=5", "storage.checkpoint_interval_seconds=0.000001", "storage.metrics_interval_seconds=0.1",
        f"storage.keep_last_checkpoints={KEEP}", "storage.trajectories.every_episodes=0"]


class SavedScores:
    """After each update (and so after the checkpointer saved), the score and version of `<run>.ckpt`."""

    def __init__(self, run: Path) -> None:
        self.run, self.saved = run, []

    def on_update_end(self, report) -> None:
        saved = load_checkpoint(checkpoint_path(self.run))
        self.saved.append((saved.policy_version, checkpoint_score(saved)))

    def on_train_end(self, result) -> None:
        pass


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, list[tuple[int, float | None]]]:
    folder = tmp_path_factory.mktemp("kept")
    run = folder / "cp.h5"
    scores = SavedScores(run)
    library.run(ROOT / "configs" / "ppo_cartpole.yaml", [*TINY, f"storage.directory={folder}", "storage.run_name=cp"],
                observers=[scores])
    return run, scores.saved


def test_the_newest_k_are_kept_and_older_ones_removed(trained) -> None:
    run, saved = trained
    last = load_checkpoint(checkpoint_path(run)).policy_version
    assert last == saved[-1][0] == 8  # 4096 frames, 512 per update
    kept = versioned_checkpoints(run)
    assert list(kept) == [last - 2, last - 1, last]
    assert os.path.samefile(kept[last], checkpoint_path(run))  # a link to the newest, not a second copy
    for version, path in kept.items():
        assert load_checkpoint(path).policy_version == version


def test_best_is_the_highest_score_when_saved(trained) -> None:
    run, saved = trained
    scored = [(score, -version) for version, score in saved if score is not None]
    best_score, best_version = max(scored)[0], -max(scored)[1]  # the first save that reached the highest
    best = load_checkpoint(best_checkpoint_path(run))
    assert (best.policy_version, checkpoint_score(best)) == (best_version, best_score)


def test_resume_from_best(trained, tmp_path, capsys) -> None:
    source, _ = trained
    run = tmp_path / "cp.h5"
    shutil.copy(source, run)
    shutil.copy(checkpoint_path(source), checkpoint_path(run))
    shutil.copytree(source.with_suffix(".checkpoints"), run.with_suffix(".checkpoints"))
    best = load_checkpoint(best_checkpoint_path(run))
    frames = best.env_frames + 1024
    # best is older than the newest: --force, or the resume is refused (tests/test_checkpoint_resume.py)
    assert main(["train", "--resume", str(run), "--checkpoint", "best", "--force",
                 f"stop.total_env_steps={frames}"]) == 0
    last = load_checkpoint(checkpoint_path(run))
    assert (last.policy_version, last.env_frames) == (best.policy_version + 2, frames)
    with open_run(run) as reader:
        versions = reader.metric("learning_rate").policy_version
    assert list(versions) == list(range(1, last.policy_version + 1))  # the rows past the best one were dropped, not repeated
    assert max(versioned_checkpoints(run)) == last.policy_version  # none left from the abandoned continuation


def test_checkpoint_choice_mistakes_are_one_line(trained, tmp_path, capsys) -> None:
    run, _ = trained
    assert main(["train", "--resume", str(run), "--checkpoint", str(tmp_path / "none.ckpt")]) == 2
    assert capsys.readouterr().err.strip().endswith(f"no checkpoint at {tmp_path / 'none.ckpt'}: give last, best "
                                                    "or the path of a checkpoint file")
    with pytest.raises(ConfigError, match="--checkpoint chooses where a training run resumes"):
        library.prepare(ROOT / "configs" / "ppo_cartpole.yaml", checkpoint="best")


def test_keep_last_checkpoints_is_validated() -> None:
    with pytest.raises(ConfigError, match="keep_last_checkpoints"):
        library.prepare(ROOT / "configs" / "ppo_cartpole.yaml", ["storage.keep_last_checkpoints=0"])


def test_by_default_only_the_newest_and_the_best(tmp_path) -> None:
    defaults = [option for option in TINY if not option.startswith(("storage.keep_last", "stop.total_env_steps"))]
    result = library.run(ROOT / "configs" / "ppo_cartpole.yaml",
                         [*defaults, "stop.total_env_steps=2048", f"storage.directory={tmp_path}", "storage.run_name=d"])
    assert sorted(path.name for path in tmp_path.iterdir()) == ["d.checkpoints", "d.ckpt", "d.h5"]
    assert [path.name for path in (tmp_path / "d.checkpoints").iterdir()] == ["best.ckpt"]
    assert checkpoint_score(load_checkpoint(best_checkpoint_path(result.path))) is not None
