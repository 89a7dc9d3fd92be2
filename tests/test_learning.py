"""Learning tests: the serial trainer must actually learn, with a fixed seed and a bounded budget."""

from __future__ import annotations

from pathlib import Path

import pytest

from lamarckian_hpc.config import load_config
from lamarckian_hpc.runtime.runners.trainer import SerialTrainer

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@pytest.mark.slow
def test_ppo_learns_cartpole_within_300k_frames():
    config = load_config(CONFIGS / "ppo_cartpole.yaml", ["seed=0"])
    assert config.stop.total_env_steps == 300_000 and config.stop.target_return == 475
    trainer = SerialTrainer(config)
    try:
        result = trainer.train()
    finally:
        trainer.close()
    assert result.target_reached_at_frames is not None, f"mean return {result.recent_return_mean} after {result.env_frames} frames"
    assert result.target_reached_at_frames <= 300_000
    assert result.recent_return_mean >= 475.0


@pytest.mark.slow
def test_impala_learns_cartpole_in_one_process():
    config = load_config(CONFIGS / "impala_cartpole.yaml", ["runtime.mode=serial", "stop.total_env_steps=150000"])
    trainer = SerialTrainer(config)
    try:
        result = trainer.train()
    finally:
        trainer.close()
    assert result.target_reached_at_frames is not None, f"mean return {result.recent_return_mean}"


def test_a3c_in_one_process_is_refused_with_a_reason():
    config = load_config(CONFIGS / "a3c_cartpole.yaml", ["runtime.mode=serial"])
    with pytest.raises(ValueError, match="runtime.mode=ray"):
        SerialTrainer(config)
