"""Resuming from a checkpoint: one older than the run's newest is refused without --force, and with
it the newer kept checkpoints survive until the resumed run saves its first; a checkpoint that does
not fit the run's learner (another architecture, another environment's spaces, another algorithm,
state missing) is one line naming what differs, with the run's files untouched. Real checkpoint
files of a short real training run, resumed through the command line."""

from __future__ import annotations

import hashlib
import logging
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from lamarckian_hpc import library
from lamarckian_hpc.cli import main
from lamarckian_hpc.config import ConfigError, load_config
from lamarckian_hpc.runtime.algorithms import make_learner
from lamarckian_hpc.runtime.learner.checkpoint import (
    CheckpointMismatch,
    check_fits,
    checkpoint_path,
    load_checkpoint,
    save_checkpoint,
    versioned_checkpoints,
)
from lamarckian_hpc.runtime.run_shape import spaces_of
from lamarckian_hpc.storage import open_run
from lamarckian_hpc.trained.policy import TrainedPolicyError, load_trained_policy

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "ppo_cartpole.yaml"
TINY = ["runtime.mode=serial", "env.num_envs=4", "stop.total_env_steps=3072", "stop.target_return=null",
        "storage.checkpoint_interval_seconds=0.000001", "storage.metrics_interval_seconds=0.1",
        "storage.keep_last_checkpoints=3", "storage.trajectories.every_episodes=0"]


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A finished run: 6 updates of 512 frames, a checkpoint after each, v4 to v6 kept."""
    folder = tmp_path_factory.mktemp("source")
    library.run(CONFIG, [*TINY, f"storage.directory={folder}", "storage.run_name=r"])
    return folder / "r.h5"


@pytest.fixture
def run(source, tmp_path) -> Path:
    """A copy of the run, its checkpoint and its kept checkpoints, for one test to change."""
    copy = tmp_path / "r.h5"
    shutil.copy(source, copy)
    shutil.copy(checkpoint_path(source), checkpoint_path(copy))
    shutil.copytree(source.with_suffix(".checkpoints"), copy.with_suffix(".checkpoints"))
    return copy


def _files(run: Path) -> dict[str, str]:
    """Every file of the run (run file, checkpoints, kept ones) and a digest of its bytes."""
    paths = [run, checkpoint_path(run), *sorted(run.with_suffix(".checkpoints").iterdir())]
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in paths}


def _one_line(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def test_resuming_from_an_older_checkpoint_is_refused_without_force(run, capsys) -> None:
    assert sorted(versioned_checkpoints(run)) == [4, 5, 6]
    before = _files(run)
    older = versioned_checkpoints(run)[4]
    assert main(["train", "--resume", str(run), "--checkpoint", str(older), "stop.total_env_steps=4096"]) == 2
    assert _one_line(capsys) == (
        f"error: checkpoint {older} (policy version 4) is older than the run's newest, {checkpoint_path(run)} "
        "(policy version 6); resuming from it drops the run file's rows after version 4 and, at its first save, "
        "the checkpoints of policy versions 5, 6: give --force to resume from it anyway")
    assert _files(run) == before  # nothing read past, nothing removed
    assert main(["train", "--resume", str(run), "--checkpoint", "last", "stop.total_env_steps=3072"]) == 0


def test_a_forced_resume_keeps_the_newer_checkpoints_until_its_first_save(run, caplog) -> None:
    kept = versioned_checkpoints(run)
    abandoned = [kept[5], kept[6]]

    class KeptAtEachUpdate:
        def __init__(self) -> None:
            self.seen: list[list[int]] = []

        def on_update_end(self, report) -> None:
            self.seen.append(sorted(versioned_checkpoints(run)))

        def on_train_end(self, result) -> None:
            pass

    watch = KeptAtEachUpdate()
    with caplog.at_level(logging.WARNING, logger="lamarckian_hpc.runtime.learner.checkpoint"):
        library.run(resume=run, checkpoint=kept[4], force=True, observers=[watch],
                    overrides=["stop.total_env_steps=4096", "storage.checkpoint_interval_seconds=null"])
    # Four updates without a save (the checkpoint comes when training ends): v5 and v6 stay throughout.
    assert watch.seen == [[4, 5, 6]] * 4
    assert sorted(versioned_checkpoints(run)) == [4, 8]  # then removed, saying so, when v8 is saved
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert warnings == ["removed the checkpoints kept after policy version 4, the continuation abandoned by "
                        f"resuming from it: {abandoned[0]}, {abandoned[1]}"]
    with open_run(run) as reader:
        assert list(reader.metric("learning_rate").policy_version) == list(range(1, 9))
    assert load_checkpoint(checkpoint_path(run)).policy_version == 8


def test_force_needs_a_resumed_training_run() -> None:
    with pytest.raises(ConfigError, match="--force lets a resumed training run continue from a checkpoint older"):
        library.prepare(CONFIG, force=True)


@pytest.mark.parametrize("override, difference", [
    ("model.policy_hidden_sizes=[32]",
     "'model.trunk.1.0.weight' has shape (64, 4) in the checkpoint and (32, 4) in the model; "
     "'model.trunk.1.0.bias' has shape (64,) in the checkpoint and (32,) in the model; 5 more differ in shape; "
     "unexpected: model.trunk.1.2.weight, model.trunk.1.2.bias, model.critic_trunk.1.2.weight, "
     "model.critic_trunk.1.2.bias"),
    ("env.id=Acrobot-v1",  # 6 observations and 3 actions, not 4 and 2
     "'model.trunk.1.0.weight' has shape (64, 4) in the checkpoint and (64, 6) in the model; "
     "'model.critic_trunk.1.0.weight' has shape (64, 4) in the checkpoint and (64, 6) in the model; "
     "2 more differ in shape"),
], ids=["hidden-sizes", "spaces"])
def test_a_checkpoint_of_another_model_is_one_line(run, capsys, override, difference) -> None:
    before = _files(run)
    assert main(["train", "--resume", str(run), override, "stop.total_env_steps=4096"]) == 2
    assert _one_line(capsys) == f"error: checkpoint {checkpoint_path(run)} does not fit this run: {difference}"
    assert _files(run) == before


def test_a_checkpoint_without_optimizer_state_is_one_line(run, tmp_path, capsys) -> None:
    saved = load_checkpoint(checkpoint_path(run))
    stripped = tmp_path / "stripped.ckpt"
    save_checkpoint(stripped, replace(saved, learner={k: v for k, v in saved.learner.items() if k != "optimizer"}))
    assert main(["train", "--resume", str(run), "--checkpoint", str(stripped), "stop.total_env_steps=4096"]) == 2
    assert _one_line(capsys) == f"error: checkpoint {stripped} does not fit this run: missing: optimizer"


def test_a_checkpoint_of_another_algorithm_names_what_differs(run) -> None:
    """A PPO learner's checkpoint against the DQN learner of the same environment."""
    config = load_config(ROOT / "configs" / "dqn_cartpole.yaml", ["runtime.mode=serial"])
    dqn = make_learner(config, *spaces_of(config))
    with pytest.raises(CheckpointMismatch) as raised:
        check_fits(checkpoint_path(run), load_checkpoint(checkpoint_path(run)).learner, dqn.state_dict())
    message = str(raised.value)
    assert "\n" not in message and message.startswith(f"checkpoint {checkpoint_path(run)} does not fit this run: ")
    assert "; missing: gradient_steps, owed_steps, target, model.head.weight, ... (5 in all); " in message
    assert "; unexpected: model.critic.1.weight, " in message


def test_a_file_that_is_not_a_training_checkpoint_is_one_line(tmp_path) -> None:
    path = tmp_path / "other.ckpt"
    torch.save({"format": 1, "policy_version": 3, "weights": {}}, path)
    with pytest.raises(CheckpointMismatch, match=r"^checkpoint .*other\.ckpt is not a training checkpoint of this "
                       r"version: missing: env_frames, .*; unexpected: weights$"):
        load_checkpoint(path)


def test_evaluating_a_checkpoint_of_another_model_is_one_line(run, tmp_path) -> None:
    saved = load_checkpoint(checkpoint_path(run))
    wider = tmp_path / "wider.ckpt"
    model = {**saved.learner["model"], "head.logits.weight": torch.zeros(3, 64)}
    save_checkpoint(wider, replace(saved, learner={**saved.learner, "model": model}))
    with pytest.raises(TrainedPolicyError) as raised:
        load_trained_policy(run, wider)
    assert str(raised.value) == (f"checkpoint {wider} does not fit this run: 'head.logits.weight' has shape (3, 64) "
                                 "in the checkpoint and (2, 64) in the model")


def test_the_command_prints_the_mismatch_without_a_traceback(run, tmp_path) -> None:
    """The command in a process of its own, on the distributed runtime (its learner is checked as
    the serial one is, after Ray started and before anything is written)."""
    before = _files(run)
    resumed = subprocess.run([sys.executable, "-m", "lamarckian_hpc", "train", "--resume", str(run),
                              "runtime.mode=ray", "runtime.num_actors=1",
                              "model.policy_hidden_sizes=[32]"], cwd=tmp_path, capture_output=True, text=True,
                             timeout=180)
    lines = [line for line in resumed.stderr.splitlines() if line.strip()]
    assert resumed.returncode == 2
    assert len(lines) == 1 and lines[0].startswith(f"error: checkpoint {checkpoint_path(run)} does not fit this run: "
                                                   "'model.trunk.1.0.weight' has shape (64, 4)"), resumed.stderr
    assert _files(run) == before
