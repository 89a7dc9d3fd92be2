"""`lamarckian-hpc replay`: one recorded episode as an animated GIF, to watch what a policy did
without the environment (an ALE ROM, a game server) or the policy's weights: the run file's
recorded observations are enough.

Frame k shows the observation the policy acted on at step k, with the step and the return so far
written in its corner (which also keeps Pillow from merging frames that look alike, so the GIF has
exactly one frame per step). What can be drawn:

- images: the newest frame of a channels-first stack (uint8 (4, 84, 84) from image Pong), a grey
  (H, W) frame or a colour (H, W, 3) one, scaled up 3x (2x above 128 pixels);
- built-in vector Pong (`lamarckian/Pong-v0`, 6 floats, `PongCore.view`): the court, both paddles
  and the ball, the agent's paddle on the right;
- CartPole (`CartPole-v1`, 4 floats): the cart at its position and the pole at its angle.

Vector observations are told apart by the run's `env.id`, or by their shape when the config names
no env. Pillow comes with matplotlib, so this needs only the analysis extra.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from lamarckian_hpc.envs.pong_core import PongRules
from lamarckian_hpc.storage import RunFileReadError, open_run

from .trajectories import WRITTEN_BY

DEFAULT_FPS = 30
#: GIF frame times are hundredths of a second, and browsers slow down frames shorter than 20 ms.
MAX_FPS = 50
PONG_IDS = ("lamarckian/Pong-v0",)
CARTPOLE_IDS = ("CartPole-v0", "CartPole-v1")
RENDERABLE = ("images (uint8 (stack, H, W) frame stacks, (H, W) grey, (H, W, 3) colour), vector Pong "
              "(lamarckian/Pong-v0, 6 floats) and CartPole (CartPole-v1, 4 floats)")
PONG_SIZE, PONG_MARGIN = 240, 12
CARTPOLE_WIDTH, CARTPOLE_HEIGHT = 480, 240
#: CartPole's geometry in world units, as gymnasium draws it: the track shown, the cart, the pole.
CARTPOLE_WORLD_WIDTH, CART_WIDTH, CART_HEIGHT, POLE_LENGTH, POLE_WIDTH = 5.4, 0.4, 0.24, 1.0, 0.08

Renderer = Callable[[np.ndarray], Image.Image]


class ReplayError(ValueError):
    """A replay that cannot be made; the message is one line, starting with `error:`."""


@dataclass(frozen=True)
class Replay:
    """What `replay_episode` wrote."""

    path: Path
    policy: str
    episode: int
    steps: int
    episode_return: float
    fps: int
    member: int | None = None

    def summary(self) -> str:
        whose = f"policy {self.policy!r}" if self.member is None else f"member {self.member} of policy {self.policy!r}"
        return (f"episode {self.episode} of {whose}: {self.steps} steps, return "
                f"{self.episode_return:.6g}; {self.steps} frames at {self.fps} fps")


def _to_uint8(array: np.ndarray) -> np.ndarray:
    """uint8 as it is; floats in [0, 1] scaled to 255, other numbers clipped to [0, 255]."""
    if array.dtype == np.uint8:
        return array
    values = array.astype(np.float64)
    if values.size and values.min() >= 0.0 and values.max() <= 1.0:
        values = values * 255.0
    return np.clip(np.rint(values), 0, 255).astype(np.uint8)


def image_frame(observation: np.ndarray) -> Image.Image:
    """An image observation as an RGB picture: the newest frame of a channels-first stack, a grey
    frame or a colour one, scaled up 3x (2x when larger than 128 pixels)."""
    array = np.asarray(observation)
    if array.ndim == 3 and array.shape[-1] == 3:
        picture = Image.fromarray(_to_uint8(array), "RGB")
    elif array.ndim in (2, 3):
        picture = Image.fromarray(_to_uint8(array[-1] if array.ndim == 3 else array), "L").convert("RGB")
    else:
        raise ReplayError(f"error: cannot draw an observation of shape {array.shape} as an image; "
                          f"replay draws {RENDERABLE}")
    scale = 3 if max(picture.size) <= 128 else 2
    return picture.resize((picture.width * scale, picture.height * scale), Image.Resampling.NEAREST)


def pong_frame(observation: np.ndarray) -> Image.Image:
    """Vector Pong from its 6 floats (ball x, y, vx, vy, own paddle y, other paddle y; positions in
    [-1, 1], seen from the right): the court, the opponent's paddle (left), the agent's (right),
    the ball. y grows upwards in the court, downwards in the picture."""
    ball_x, ball_y, _, _, own, other = ((float(value) + 1.0) / 2.0 for value in np.asarray(observation)[:6])
    span = PONG_SIZE - 2 * PONG_MARGIN
    half = PongRules().paddle_half_height

    def point(x: float, y: float) -> tuple[float, float]:
        return PONG_MARGIN + x * span, PONG_MARGIN + (1.0 - y) * span

    picture = Image.new("RGB", (PONG_SIZE, PONG_SIZE), (20, 20, 20))
    draw = ImageDraw.Draw(picture)
    draw.rectangle([point(0.0, 1.0), point(1.0, 0.0)], outline=(110, 110, 110))
    for k in range(0, span, 12):
        draw.line([(PONG_SIZE / 2, PONG_MARGIN + k), (PONG_SIZE / 2, PONG_MARGIN + k + 6)], fill=(80, 80, 80))
    for x, y, colour in ((0.0, other, (230, 140, 40)), (1.0, own, (60, 200, 90))):
        (left, top), (right, bottom) = point(x - 0.015, min(1.0, y + half)), point(x + 0.015, max(0.0, y - half))
        draw.rectangle([left, top, right, bottom], fill=colour)
    (left, top), (right, bottom) = point(ball_x - 0.015, ball_y + 0.015), point(ball_x + 0.015, ball_y - 0.015)
    draw.rectangle([left, top, right, bottom], fill=(245, 245, 245))
    return picture


def cartpole_frame(observation: np.ndarray) -> Image.Image:
    """CartPole from its 4 floats (cart position, velocity, pole angle, angular velocity): the track,
    the cart at its position and the pole at its angle (positive: leaning right), as gymnasium draws it."""
    position, _, angle, _ = (float(value) for value in np.asarray(observation)[:4])
    scale = CARTPOLE_WIDTH / CARTPOLE_WORLD_WIDTH
    track = CARTPOLE_HEIGHT * 0.75
    centre = CARTPOLE_WIDTH / 2 + position * scale
    picture = Image.new("RGB", (CARTPOLE_WIDTH, CARTPOLE_HEIGHT), (255, 255, 255))
    draw = ImageDraw.Draw(picture)
    draw.line([(0, track), (CARTPOLE_WIDTH, track)], fill=(0, 0, 0))
    for limit in (-2.4, 2.4):  # where the episode ends
        x = CARTPOLE_WIDTH / 2 + limit * scale
        draw.line([(x, track - 8), (x, track + 8)], fill=(200, 60, 60), width=2)
    half_width, height = CART_WIDTH * scale / 2, CART_HEIGHT * scale
    draw.rectangle([centre - half_width, track - height / 2, centre + half_width, track + height / 2], fill=(0, 0, 0))
    pivot = (centre, track - height / 4)
    along = (math.sin(angle) * scale, -math.cos(angle) * scale)  # a world unit up the pole, in pixels
    across = (-along[1] * POLE_WIDTH / 2, along[0] * POLE_WIDTH / 2)
    draw.polygon([(pivot[0] + side * across[0] + reach * along[0], pivot[1] + side * across[1] + reach * along[1])
                  for side, reach in ((-1, 0.0), (1, 0.0), (1, POLE_LENGTH), (-1, POLE_LENGTH))], fill=(202, 152, 101))
    draw.ellipse([pivot[0] - 4, pivot[1] - 4, pivot[0] + 4, pivot[1] + 4], fill=(129, 132, 203))
    return picture


def renderer_for(env_id: str | None, shape: tuple[int, ...]) -> Renderer:
    """How to draw observations of `shape` from env `env_id` (None: the config names none)."""
    if len(shape) >= 2:
        return image_frame
    if shape == (6,) and (env_id in PONG_IDS or env_id is None):
        return pong_frame
    if shape == (4,) and (env_id in CARTPOLE_IDS or env_id is None):
        return cartpole_frame
    raise ReplayError(f"error: cannot render observations of shape {shape} (env {env_id or 'not named'}); "
                      f"replay draws {RENDERABLE}")


def _caption(picture: Image.Image, text: str) -> Image.Image:
    draw = ImageDraw.Draw(picture)
    left, top, right, bottom = draw.textbbox((4, 3), text)
    draw.rectangle([left - 2, top - 2, right + 2, bottom + 2], fill=(0, 0, 0))
    draw.text((4, 3), text, fill=(255, 255, 255))
    return picture


def episode_frames(observations: np.ndarray, rewards: np.ndarray, renderer: Renderer) -> list[Image.Image]:
    """One captioned picture per step: the observation acted on, the step, the return so far."""
    returns = np.cumsum(rewards, dtype=np.float64)
    return [_caption(renderer(observation), f"step {k}  return {returns[k]:.4g}")
            for k, observation in enumerate(observations)]


def default_output(path: Path, policy: str, episode: int, member: int | None = None) -> Path:
    """`<run stem>-<policy>[-member<M>]-episode<K>.gif`, in the current folder."""
    whose = f"{policy}-member{member}" if member is not None else policy
    return Path(re.sub(r"[^\w.-]", "_", f"{path.stem}-{whose}-episode{episode}") + ".gif")


def _choose_policy(path: Path, policies: list[str], policy: str | None) -> str:
    if not policies:
        raise ReplayError(f"error: {path} has no recorded episodes (/trajectories); it is written by {WRITTEN_BY}")
    if policy is None:
        if len(policies) > 1:
            raise ReplayError(f"error: {path} records episodes of policies {', '.join(policies)}: "
                              "choose one with --policy")
        return policies[0]
    if policy not in policies:
        raise ReplayError(f"error: {path} has no recorded episodes of policy {policy!r} "
                          f"(it records {', '.join(policies)})")
    return policy


def _read_episode(path: Path, episode: int, policy: str | None,
                  member: int | None = None) -> tuple[str, dict, float, str | None]:
    """(policy, the episode's steps, its return, the config's env id), or one ReplayError line."""
    if not path.exists():
        raise ReplayError(f"error: no such run file: {path}")
    if not path.is_file():
        raise ReplayError(f"error: {path} is not a file")
    try:
        with open_run(path) as reader:
            policy = _choose_policy(path, reader.trajectory_policies(), policy)
            index = reader.episodes(policy)
            steps = reader.episode(episode, policy, index, member)
            env = reader.config.get("env") if isinstance(reader.config, dict) else None
    except KeyError as error:  # an episode that is not recorded: the reader's message names what is
        raise ReplayError(f"error: {error.args[0] if error.args else error}") from None
    except RunFileReadError as error:
        raise ReplayError(f"error: {error}") from None
    except (OSError, ValueError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ReplayError(f"error: {path} is not a readable run file: {reason}") from None
    chosen = index["episode"] == episode
    if member is not None:
        chosen &= index["member"] == member
    episode_return = float(index["return"][np.flatnonzero(chosen)[0]])
    env_id = env.get("id") if isinstance(env, dict) and isinstance(env.get("id"), str) else None
    return policy, steps, episode_return, env_id


def replay_episode(path: str | Path, episode: int, policy: str | None = None, out: str | Path | None = None,
                   fps: int = DEFAULT_FPS, member: int | None = None) -> Replay:
    """Writes recorded episode `episode` of `policy` (the only one recorded when None) of the run
    file at `path` as a GIF at `out` (default: `default_output`), one frame per step at `fps`. In a
    population run episodes are numbered per member: `member` names whose (needed when several
    members recorded an episode of that number).
    Raises ReplayError (one line) for a file, policy, episode or observation it cannot replay."""
    if not 1 <= fps <= MAX_FPS:
        raise ReplayError(f"error: --fps must be between 1 and {MAX_FPS} (GIF frame times are hundredths of a "
                          "second, and browsers slow down faster frames)")
    path = Path(path)
    policy, steps, episode_return, env_id = _read_episode(path, episode, policy, member)
    observations = steps["observations"]
    frames = episode_frames(observations, steps["rewards"], renderer_for(env_id, tuple(observations.shape[1:])))
    target = Path(out) if out is not None else default_output(path, policy, episode, member)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        frames[0].save(target, format="GIF", save_all=True, append_images=frames[1:], duration=round(1000 / fps),
                       loop=0)
    except OSError as error:
        raise ReplayError(f"error: cannot write {target}: {error.strerror or error}") from None
    return Replay(path=target, policy=policy, episode=episode, steps=len(frames), episode_return=episode_return,
                  fps=fps, member=member)
