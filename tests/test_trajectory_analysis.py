"""Recorded episodes through `analysis/trajectories.py`, `lamarckian-hpc report` and `lamarckian-hpc
replay`, on small run files written with the real RunWriter from episodes really played: CartPole
and Pendulum stepped with gymnasium, vector Pong with PongEnv, and image Pong as (4, 84, 84) uint8
frame stacks drawn from PongEnv's states (so the test needs no ALE). The policies change with
their version, as a learner's would, so that the action histograms have something to show.

The figures' CSVs are checked against what the run-file reader returns, the GIFs by counting
their frames, and every mistake ends in one line and exit status 2.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np
import pandas as pd
import pytest
from PIL import Image

from lamarckian_hpc.analysis import build_report
from lamarckian_hpc.analysis.replay import image_frame
from lamarckian_hpc.cli import main
from lamarckian_hpc.envs.pong import PongEnv
from lamarckian_hpc.envs.pong_core import DOWN, STAY, UP
from lamarckian_hpc.storage import RunWriter, open_run
from lamarckian_hpc.storage.trajectories import EpisodeRecord, TrajectorySpec

ROOT = Path(__file__).resolve().parents[1]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MISSING = ("has no recorded episodes (/trajectories); it is written by "
           "`storage.trajectories.every_episodes` > 0 in train, PBT, EMOGI and league runs")
#: A policy: (observation, policy version, random generator) -> action.
Policy = Callable[[np.ndarray, int, np.random.Generator], object]


def play(env: gym.Env, policy: Policy, episodes: int, every: int, steps_per_version: int,
         seed: int) -> list[dict]:
    """Plays `episodes` episodes and keeps one in `every`, as a recording actor does: the
    observation acted on, the action, the reward and the policy version of every step."""
    rng, total, kept = np.random.default_rng(seed), 0, []
    for number in range(episodes):
        observation, _ = env.reset(seed=seed + number)
        steps: dict[str, list] = {"observations": [], "actions": [], "rewards": [], "versions": []}
        done, terminated = False, False
        while not done:
            version = total // steps_per_version
            action = policy(observation, version, rng)
            next_observation, reward, terminated, truncated, _ = env.step(action)
            for key, value in zip(steps, (observation, action, reward, version)):
                steps[key].append(value)
            observation, total, done = next_observation, total + 1, terminated or truncated
        if number % every == 0:
            kept.append({**{key: np.asarray(value) for key, value in steps.items()}, "episode": number,
                         "terminated": bool(terminated), "env_frames": total})
    return kept


def write_run(path: Path, env_id: str, spec: TrajectorySpec, episodes: list[dict]) -> Path:
    """A closed run file of `env_id` whose policy "main" recorded `episodes` (from `play`)."""
    config = {"algorithm": {"name": "ppo"}, "env": {"id": env_id}, "runtime": {"mode": "serial"}}
    with RunWriter(path, config, ["episode_return_mean"], trajectories=[spec]) as writer:
        for k, episode in enumerate(episodes):
            writer.append_episode(EpisodeRecord(
                policy_id=spec.policy_id, agent_id="agent_0",
                observations=episode["observations"].astype(spec.observation_dtype),
                actions=episode["actions"].astype(spec.action_dtype).reshape(-1, *spec.action_shape),
                rewards=episode["rewards"].astype(np.float32), policy_versions=episode["versions"],
                terminated=episode["terminated"], episode=episode["episode"],
                episode_return=float(episode["rewards"].sum()), actor=k % 2, host="node0",
                env_frames=episode["env_frames"], wall_time=1e-3 * episode["env_frames"]))
            if k % 3 == 2:
                writer.flush()
    return path


def balancing(observation: np.ndarray, version: int, rng: np.random.Generator) -> int:
    """CartPole: pushes under the falling pole more often as the version grows, else at random."""
    if rng.random() < min(1.0, version / 4):
        return int(observation[2] + 0.5 * observation[3] > 0)
    return int(rng.integers(2))


def tracking(observation: np.ndarray, version: int, rng: np.random.Generator) -> int:
    """Vector Pong: follows the ball with the right paddle, moving less at random as it learns."""
    if rng.random() < 0.5 / (1 + version):
        return int(rng.integers(3))
    gap = observation[1] - observation[4]
    return UP if gap > 0.05 else DOWN if gap < -0.05 else STAY


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("trajectory_runs")
    cartpole = play(gym.make("CartPole-v1", max_episode_steps=120), balancing, 16, 2, 100, seed=1)
    pendulum = play(gym.make("Pendulum-v1", max_episode_steps=40), lambda o, v, rng: np.array(
        [np.clip(-2.0 * o[2] * v / 3 + rng.normal(0.0, 0.5), -2.0, 2.0)], dtype=np.float32), 6, 1, 40, seed=2)
    pong = play(PongEnv(opponent_skill=0.3, points_to_win=2, max_steps=400), tracking, 4, 1, 60, seed=3)
    paths = {
        "cartpole": write_run(folder / "cartpole.h5", "CartPole-v1", TrajectorySpec("main", (4,), "float32"), cartpole),
        "pendulum": write_run(folder / "pendulum.h5", "Pendulum-v1",
                              TrajectorySpec("main", (3,), "float32", (1,), "float32"), pendulum),
        "pong": write_run(folder / "pong.h5", "lamarckian/Pong-v0", TrajectorySpec("main", (6,), "float32"), pong),
        "image": write_run(folder / "image.h5", "lamarckian/PongImage-v0",
                           TrajectorySpec("main", (4, 84, 84), "uint8"), image_episodes(2)),
        "plain": folder / "plain.h5",
    }
    with RunWriter(paths["plain"], {"algorithm": {"name": "ppo"}, "env": {"id": "CartPole-v1"}},
                   ["episode_return_mean"]) as writer:
        writer.append("episode_return_mean", 20.0, env_frames=100, policy_version=1)
    return paths


def raster(env: PongEnv) -> np.ndarray:
    """An 84x84 grey frame of a vector Pong state: paddles and ball on a dark court."""
    core, frame = env.core, np.full((84, 84), 30, dtype=np.uint8)
    for x, y in ((2, core.left_y), (81, core.right_y)):
        row = int((1.0 - y) * 83)
        frame[max(0, row - 8):row + 8, x - 1:x + 1] = 200
    row, column = int((1.0 - core.ball_y) * 83), int(core.ball_x * 83)
    frame[max(0, row - 1):row + 1, max(0, column - 1):column + 1] = 255
    return frame


def image_episodes(count: int) -> list[dict]:
    """Image Pong episodes: stacks of the last four frames, ALE's six actions (2, 4 up; 3, 5 down)."""
    env, rng, episodes, total = PongEnv(points_to_win=1, max_steps=30), np.random.default_rng(4), [], 0
    for number in range(count):
        env.reset(seed=number)
        frames, done = [raster(env)] * 4, False
        steps: dict[str, list] = {"observations": [], "actions": [], "rewards": [], "versions": []}
        while not done:
            action = int(rng.integers(6))
            _, reward, terminated, truncated, _ = env.step({2: UP, 4: UP, 3: DOWN, 5: DOWN}.get(action, STAY))
            for key, value in zip(steps, (np.stack(frames), action, reward, total // 25)):
                steps[key].append(value)
            frames, total, done = [*frames[1:], raster(env)], total + 1, terminated or truncated
        episodes.append({**{key: np.asarray(value) for key, value in steps.items()}, "episode": number,
                         "terminated": bool(terminated), "env_frames": total})
    return episodes


def run_script(*arguments: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "analysis" / "trajectories.py"), *map(str, arguments)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


def recorded(path: Path) -> tuple[dict[str, np.ndarray], dict[int, dict[str, np.ndarray]]]:
    """The reader's index of a run's recorded episodes, and every step of each."""
    with open_run(path) as reader:
        index = reader.episodes("main")
        return index, {int(number): reader.episode(int(number), "main") for number in index["episode"]}


def one_line_error(done: subprocess.CompletedProcess | tuple[int, str], message: str) -> None:
    status, stderr = (done.returncode, done.stderr) if isinstance(done, subprocess.CompletedProcess) else done
    assert status == 2 and stderr.count("\n") == 1 and message in stderr, stderr


def test_the_script_draws_what_the_episodes_hold(runs: dict[str, Path], tmp_path: Path) -> None:
    done = run_script(runs["cartpole"], runs["pendulum"], "--out", tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("| run | policy |") and "| cartpole | main |" in done.stdout
    for name in ("cartpole", "pendulum"):
        for figure in ("episodes", "actions", "rewards"):
            png = tmp_path / f"{figure}_{name}_main.png"
            assert png.read_bytes().startswith(PNG_SIGNATURE) and png.with_suffix(".csv").is_file()
    table = pd.read_csv(tmp_path / "trajectories.csv", float_precision="round_trip").set_index("run")
    for name in ("cartpole", "pendulum"):
        index, steps = recorded(runs[name])
        episodes = pd.read_csv(tmp_path / f"episodes_{name}_main.csv", float_precision="round_trip")
        np.testing.assert_array_equal(episodes["episode"], index["episode"])
        np.testing.assert_array_equal(episodes["return"], index["return"])
        np.testing.assert_array_equal(episodes["length"], index["length"])
        rewards = pd.read_csv(tmp_path / f"rewards_{name}_main.csv")
        numbers = [int(index["episode"][k]) for k in (0, len(index["episode"]) // 2, -1)]
        assert list(dict.fromkeys(rewards["episode"])) == numbers  # first, middle and last recorded
        for number in numbers:
            np.testing.assert_allclose(rewards.loc[rewards["episode"] == number, "reward"], steps[number]["rewards"])
        versions = np.concatenate([episode["policy_version"] for episode in steps.values()])
        row = table.loc[name]
        assert (row["episodes"], row["steps"]) == (len(index["episode"]), index["length"].sum())
        assert row["return_mean"] == pytest.approx(index["return"].mean())
        assert (row["return_min"], row["return_max"]) == (index["return"].min(), index["return"].max())
        assert (row["version_first"], row["version_last"]) == (versions.min(), versions.max())
        assert row["versions"] == len(np.unique(versions))
    assert list(pd.read_csv(tmp_path / "episodes_cartpole_main.csv")["episode"]) == list(range(0, 16, 2))


def test_action_histograms_per_range_of_policy_versions(runs: dict[str, Path], tmp_path: Path) -> None:
    assert run_script(runs["cartpole"], runs["pendulum"], "--out", tmp_path).returncode == 0
    for name in ("cartpole", "pendulum"):
        _, steps = recorded(runs[name])
        actions = np.concatenate([episode["actions"] for episode in steps.values()]).reshape(-1)
        versions = np.concatenate([episode["policy_version"] for episode in steps.values()])
        data = pd.read_csv(tmp_path / f"actions_{name}_main.csv")
        ranges = data.drop_duplicates("versions")
        assert 2 <= len(ranges) <= 4 and (ranges["version_first"].iloc[1:].to_numpy()
                                          > ranges["version_last"].iloc[:-1].to_numpy()).all()
        assert data["steps"].sum() == len(actions)  # every recorded step, once
        for row in data.itertuples():
            chosen = actions[(versions >= row.version_first) & (versions <= row.version_last)]
            if name == "cartpole":
                assert row.steps == np.count_nonzero(chosen == row.action)
                assert row.share == pytest.approx(row.steps / len(chosen))
            else:
                assert row.steps == len(chosen)
                assert (row.mean, row.std) == (pytest.approx(chosen.mean()), pytest.approx(chosen.std()))
    assert set(pd.read_csv(tmp_path / "actions_cartpole_main.csv")["action"]) == {0, 1}


def test_chosen_episodes_and_policy(runs: dict[str, Path], tmp_path: Path) -> None:
    done = run_script(runs["cartpole"], "--out", tmp_path, "--policy", "main", "--episodes", 6, 4)
    assert done.returncode == 0, done.stderr
    assert list(dict.fromkeys(pd.read_csv(tmp_path / "rewards_cartpole_main.csv")["episode"])) == [6, 4]
    one_line_error(run_script(runs["cartpole"], "--out", tmp_path, "--episodes", 5),
                   "error: episode 5 is not recorded in the runs given (they record 8 episodes: 0, 2, 4,")
    one_line_error(run_script(runs["cartpole"], "--out", tmp_path, "--policy", "opponent"),
                   f"error: {runs['cartpole']} has no recorded episodes of policy 'opponent' (/trajectories/opponent)")


def test_a_run_without_trajectories_is_one_line(runs: dict[str, Path], tmp_path: Path) -> None:
    done = run_script(runs["plain"], "--out", tmp_path)
    one_line_error(done, f"error: {runs['plain']} {MISSING}")
    assert done.stderr.startswith("error:") and done.stdout == ""


def test_the_report_shows_the_recorded_episodes(runs: dict[str, Path], tmp_path: Path) -> None:
    folder = tmp_path / "runs"
    folder.mkdir()
    for name in ("pong", "plain"):
        (folder / f"{name}.h5").write_bytes(runs[name].read_bytes())
    report = build_report(folder, tmp_path / "report")
    text = report.markdown_path.read_text()
    assert "## Recorded episodes" in text and "| pong | main |" in text
    shown = {figure.path.name for figure in report.figures}
    assert {"episodes_pong_main.png", "actions_pong_main.png", "rewards_pong_main.png"} <= shown
    assert not any("plain" in name for name in shown)
    assert all(f"(figures/{name})" in text for name in shown)


@pytest.mark.parametrize(("run", "episode", "size"), [("image", 1, (252, 252)), ("pong", 2, (240, 240)),
                                                      ("cartpole", 14, (480, 240))])
def test_replay_writes_one_frame_per_step(runs: dict[str, Path], run: str, episode: int, size: tuple[int, int],
                                          tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "gifs" / f"{run}.gif"
    assert main(["replay", str(runs[run]), "--episode", str(episode), "--out", str(out), "--fps", "20"]) == 0
    index, steps = recorded(runs[run])
    length = len(steps[episode]["rewards"])
    with Image.open(out) as gif:
        assert (gif.format, gif.n_frames, gif.size) == ("GIF", length, size)
        assert gif.info["duration"] == 50
    captured = capsys.readouterr()
    assert captured.out == f"{out}\n"
    episode_return = index["return"][list(index["episode"]).index(episode)]
    assert f"episode {episode} of policy 'main': {length} steps, return {episode_return:.6g}" in captured.err


def test_replay_writes_to_the_current_folder_by_default(runs: dict[str, Path], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["replay", str(runs["pong"]), "--episode", "0"]) == 0
    assert capsys.readouterr().out == "pong-main-episode0.gif\n"
    with Image.open(tmp_path / "pong-main-episode0.gif") as gif:
        assert gif.n_frames == len(recorded(runs["pong"])[1][0]["rewards"])


def test_replay_mistakes_are_one_line(runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    text = tmp_path / "notes.h5"
    text.write_text("not a run")
    out = ["--out", str(tmp_path / "x.gif")]
    for arguments, message in (
            ([str(runs["cartpole"]), "--episode", "3"],
             f"error: episode 3 of policy 'main' is not recorded in {runs['cartpole']} (8 are: 0, 2, 4"),
            ([str(runs["plain"]), "--episode", "0"], f"error: {runs['plain']} {MISSING}"),
            ([str(runs["pong"]), "--episode", "0", "--policy", "left"],
             f"error: {runs['pong']} has no recorded episodes of policy 'left' (it records main)"),
            ([str(text), "--episode", "0"], f"error: {text}: not a readable HDF5 file"),
            ([str(tmp_path / "missing.h5"), "--episode", "0"], "error: no such run file"),
            ([str(runs["pendulum"]), "--episode", "0"],
             "error: cannot render observations of shape (3,) (env Pendulum-v1); replay draws images"),
            ([str(runs["pong"]), "--episode", "0", "--fps", "0"], "error: --fps must be between 1 and 50")):
        assert main(["replay", *arguments, *out]) == 2
        captured = capsys.readouterr()
        one_line_error((2, captured.err), message)
        assert captured.out == ""
    assert not (tmp_path / "x.gif").exists()


def test_image_frames_of_every_layout() -> None:
    stack = np.stack([np.full((84, 84), 10 * k, dtype=np.uint8) for k in range(4)])
    stack[-1, :42] = 250
    newest = np.asarray(image_frame(stack))
    assert newest.shape == (252, 252, 3) and newest[0, 0, 0] == 250 and newest[-1, -1, 0] == 30
    assert np.asarray(image_frame(stack[-1])).shape == (252, 252, 3)
    colour = np.zeros((160, 120, 3), dtype=np.uint8)
    colour[..., 0] = 200
    picture = np.asarray(image_frame(colour))
    assert picture.shape == (320, 240, 3) and tuple(picture[5, 5]) == (200, 0, 0)
    assert np.asarray(image_frame(np.full((84, 84), 1.0, dtype=np.float32)))[0, 0, 0] == 255
