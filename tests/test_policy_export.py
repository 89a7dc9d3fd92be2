"""`lamarckian-hpc export --onnx/--torchscript/--minari`: a trained policy runs outside torch with
the same actions, and the recorded episodes load back from Minari whole. Real runs: a tiny serial
CartPole PPO run (discrete), tiny Pendulum PPO and SAC runs (continuous), each recording every
episode. onnxruntime and minari are imported inside the tests, so collecting the suite needs
neither."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from lamarckian_hpc import library
from lamarckian_hpc.cli import main
from lamarckian_hpc.config import RunConfig, load_config
from lamarckian_hpc.storage import RunWriter, open_run
from lamarckian_hpc.trained.policy import load_trained_policy

ROOT = Path(__file__).resolve().parents[1]
RECORD_ALL = ["stop.target_return=null", "storage.trajectories.every_episodes=1"]
CARTPOLE = ["runtime.mode=serial", "env.num_envs=4", "algorithm.batch_size=512", "algorithm.num_minibatches=2",
            "stop.total_env_steps=2048", *RECORD_ALL]
CONTINUOUS = {
    "ppo_pendulum": ["runtime.mode=serial", "env.num_envs=2", "algorithm.batch_size=512", "algorithm.num_minibatches=2",
                     "algorithm.num_epochs=2", "stop.total_env_steps=1024", "model.policy_hidden_sizes=[32]",
                     "model.critic_hidden_sizes=[32]", *RECORD_ALL],
    "sac_pendulum": ["algorithm.learning_starts=200", "algorithm.minibatch_size=32", "stop.total_env_steps=400",
                     "model.policy_hidden_sizes=[32,32]", "model.critic_hidden_sizes=[32,32]", *RECORD_ALL],
}
#: torch 2.13 deprecates TorchScript; loading one is what these tests check.
pytestmark = pytest.mark.filterwarnings(r"ignore:`torch\.jit\.load` is deprecated:DeprecationWarning")
#: Largest |exported - torch| of the float outputs that counts as the same graph.
TOLERANCE = 1e-5


def _train(config: str, overrides: list[str], path: Path) -> Path:
    return library.run(ROOT / "configs" / f"{config}.yaml", overrides, output=path).path


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory) -> Path:
    return _train("ppo_cartpole", CARTPOLE, tmp_path_factory.mktemp("runs") / "cartpole.h5")


def _recorded_observations(run: Path) -> np.ndarray:
    with open_run(run) as reader:
        return reader.step_columns(("observations",))["observations"]


def _export(capsys, *arguments: str) -> tuple[int, list[str], list[str]]:
    status = main(["export", *arguments])
    captured = capsys.readouterr()
    return status, captured.out.splitlines(), captured.err.splitlines()


def _session(path: str):
    import onnxruntime

    return onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])


def test_onnx_and_torchscript_give_the_greedy_actions_of_torch_on_recorded_observations(cartpole_run, tmp_path,
                                                                                          capsys):
    status, out, err = _export(capsys, str(cartpole_run), "--onnx", str(tmp_path), "--torchscript", str(tmp_path))
    assert status == 0, err
    onnx_path, torchscript_path = tmp_path / "cartpole" / "policy.onnx", tmp_path / "cartpole" / "policy.pt"
    assert out == [str(onnx_path), str(torchscript_path)]
    assert len(err) == 2 and all("identical actions 100.00% (recorded observations)" in line for line in err)

    trained = load_trained_policy(cartpole_run)
    observations = _recorded_observations(cartpole_run)
    assert len(observations) > 1000
    model = trained.model
    with torch.no_grad():  # the network itself, not the exported module: logits, their argmax, the critic
        inputs = torch.from_numpy(observations)
        logits = model.head.logits(model.trunk(inputs)).numpy()
        values = model.value(inputs).numpy()

    session = _session(str(onnx_path))
    assert [(node.name, node.shape, node.type) for node in session.get_inputs()] == \
        [("observations", ["batch", 4], "tensor(float)")]
    assert [(node.name, node.shape, node.type) for node in session.get_outputs()] == \
        [("actions", ["batch"], "tensor(int64)"), ("logits", ["batch", 2], "tensor(float)"),
         ("values", ["batch"], "tensor(float)")]
    actions, onnx_logits, onnx_values = session.run(None, {"observations": observations})
    assert np.abs(onnx_logits - logits).max() < TOLERANCE and np.abs(onnx_values - values).max() < TOLERANCE
    assert np.array_equal(actions, logits.argmax(axis=1))
    one, *_ = session.run(None, {"observations": observations[:1]})  # any batch size
    assert one.tolist() == actions[:1].tolist()
    assert session.get_modelmeta().custom_metadata_map["env_id"] == "CartPole-v1"

    scripted = torch.jit.load(str(torchscript_path))
    with torch.no_grad():
        script_actions, script_logits, script_values = (tensor.numpy() for tensor in scripted(inputs))
    assert np.array_equal(script_actions, actions)
    assert np.abs(script_logits - logits).max() < TOLERANCE and np.abs(script_values - values).max() < TOLERANCE


@pytest.mark.parametrize("config", sorted(CONTINUOUS))
def test_continuous_policies_export_their_deterministic_actions(config, tmp_path, capsys):
    run = _train(config, CONTINUOUS[config], tmp_path / f"{config}.h5")
    status, out, err = _export(capsys, str(run), "--onnx", str(tmp_path / "out"), "--torchscript",
                               str(tmp_path / "out"))
    assert status == 0, err
    trained = load_trained_policy(run)
    observations = _recorded_observations(run)
    model = trained.model
    with torch.no_grad():
        inputs = torch.from_numpy(observations)
        if config == "sac_pendulum":  # tanh(mean) scaled to [-2, 2]
            expected, mean = model.deterministic(inputs).numpy(), model.distribution(inputs)[0].numpy()
        else:  # the Gaussian's mean
            expected = mean = model.head.mean(model.trunk(inputs)).numpy()
    session = _session(out[0])
    assert [node.name for node in session.get_outputs()][:2] == ["actions", "mean"]
    actions, onnx_mean, *_ = session.run(None, {"observations": observations})
    assert actions.shape == (len(observations), 1) and actions.dtype == np.float32
    assert np.abs(actions - expected).max() < TOLERANCE and np.abs(onnx_mean - mean).max() < TOLERANCE
    with torch.no_grad():
        script_actions = torch.jit.load(out[1])(inputs)[0].numpy()
    assert np.abs(script_actions - expected).max() < TOLERANCE


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_an_image_policy_takes_uint8_frames_in_batches_of_any_size(precision, tmp_path):
    """The CNN encodes CPU batches in chunks of 128 frames; the exported graph must not fix its
    batch size on that branch. A freshly initialised network of the Pong image config (no ALE).
    A network trained in bfloat16 (`model.cnn_precision`) is exported in float32, which ONNX
    Runtime's CPU convolutions take."""
    import gymnasium as gym

    from lamarckian_hpc.runtime.algorithms import build_model
    from lamarckian_hpc.trained.policy import TrainedPolicy
    from lamarckian_hpc.trained.policy_export import check_exports, example_observations, export_onnx

    config = load_config(ROOT / "configs" / "ppo_pong_image_cpu.yaml", [f"model.cnn_precision={precision}"], RunConfig)
    frames, actions = gym.spaces.Box(0, 255, (84, 84, 4), np.uint8), gym.spaces.Discrete(6)
    trained = TrainedPolicy(config, build_model(config, frames, actions).eval(), frames, actions, 0)
    path = export_onnx(trained, tmp_path / "pong.onnx")
    session = _session(str(path))
    assert [(node.name, node.shape, node.type) for node in session.get_inputs()] == \
        [("observations", ["batch", 84, 84, 4], "tensor(uint8)")]
    (check,) = check_exports(trained, example_observations(frames, 200).numpy(), onnx_path=path)
    assert check.rows == 200 and check.max_abs_difference < TOLERANCE and check.identical_actions == 1.0


def test_the_recorded_episodes_load_back_from_minari_whole(cartpole_run, tmp_path, monkeypatch, capsys):
    import minari

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    status, out, err = _export(capsys, str(cartpole_run), "--minari", "lamarckian/cartpole-ppo-v0")
    assert status == 0, err
    assert out == [str(tmp_path / "minari" / "lamarckian" / "cartpole-ppo-v0")]
    dataset = minari.load_dataset("lamarckian/cartpole-ppo-v0")
    with open_run(cartpole_run) as reader:
        index = reader.episodes()
        episodes = [reader.episode(int(number), index=index) for number in index["episode"]]
    assert dataset.total_episodes == len(index["episode"]) == len(episodes) > 10
    assert dataset.total_steps == int(index["length"].sum())
    for recorded, loaded in zip(episodes, dataset.iterate_episodes()):
        assert np.array_equal(loaded.actions, recorded["actions"])
        assert np.array_equal(loaded.rewards, recorded["rewards"])
        assert np.array_equal(loaded.observations[:-1], recorded["observations"])
        assert np.array_equal(loaded.terminations, recorded["terminated"])
        assert np.array_equal(loaded.truncations, recorded["truncated"])
    assert dataset.recover_environment().spec.id == "CartPole-v1"

    status, out, err = _export(capsys, str(cartpole_run), "--minari", "lamarckian/cartpole-ppo-v0")
    assert status == 2 and len(err) == 1 and "exists already" in err[0]


@pytest.fixture()
def multiagent_run(tmp_path) -> Path:
    """A run file of a multi-agent config (no training needed: the refusal reads the config)."""
    config = load_config(ROOT / "configs" / "multiagent_simple_spread.yaml", [], RunConfig)
    path = tmp_path / "multiagent.h5"
    RunWriter(path, config.to_json_dict(), ("episode_return_mean",)).close(completed=True)
    return path


@pytest.mark.parametrize(("case", "expected"), [
    ("no checkpoint", "error: no checkpoint at"),
    ("no such run", "error: no such run file"),
    ("malformed dataset id", "is not a Minari dataset id"),
    ("multi-agent minari", "Minari datasets hold single-agent episodes only"),
    ("multi-agent policy", "trains several policies (multiagent)"),
    ("checkpoint of two runs", "error: --minari and --checkpoint take one run file"),
])
def test_what_cannot_be_exported_is_one_line_and_exit_status_2(case, expected, cartpole_run, multiagent_run,
                                                              tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    bare = tmp_path / "bare.h5"
    shutil.copy(cartpole_run, bare)  # without its checkpoint
    arguments = {
        "no checkpoint": [str(bare), "--onnx", str(tmp_path)],
        "no such run": [str(tmp_path / "missing.h5"), "--torchscript", str(tmp_path)],
        "malformed dataset id": [str(cartpole_run), "--minari", "not an id"],
        "multi-agent minari": [str(multiagent_run), "--minari", "lamarckian/spread-v0"],
        "multi-agent policy": [str(multiagent_run), "--torchscript", str(tmp_path)],
        "checkpoint of two runs": [str(cartpole_run), str(bare), "--onnx", str(tmp_path), "--checkpoint",
                                   str(cartpole_run.with_suffix(".ckpt"))],
    }[case]
    status, out, err = _export(capsys, *arguments)
    assert status == 2 and out == [] and len(err) == 1 and err[0].startswith("error: ") and expected in err[0], err
    assert not (tmp_path / "minari" / "not an id").exists()
