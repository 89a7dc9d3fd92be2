"""ALE Pong as the paper's Image Pong benchmark, and with the console's RAM as a byte vector:
`lamarckian/PongImage-v0` and `lamarckian/PongRAM-v0`.

Both play `ALE/Pong-v5` with the ROM that ships with ale-py (nothing is downloaded), so that a
train config names one id instead of a chain of wrappers, and every actor builds the same one.
The image id is gymnasium's own `AtariPreprocessing` (grey, 84x84, frame skip 4 with the ALE's
frame skip set to 1, max-pooled over the last two frames, up to 30 no-op starts, no terminal on
life loss) under `FrameStackObservation` (4 frames, channels first: (4, 84, 84), the layout
`models/cnn.py` reads). The RAM id uses the ALE's own frame skip of 4 and the same no-op starts;
one RAM snapshot is the whole state of the game (the console has no other memory), so it is not
stacked. Observations stay uint8 on both: they travel to the learner as bytes, and the CNN scales
them to [0, 1] in its forward pass.

ale-py and opencv come with the optional `atari` extra; the ids are registered either way, and
making one without the extra fails with the install command. Nothing here imports ale_py or cv2
at module level.
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
import numpy as np

IMAGE_ID = "lamarckian/PongImage-v0"
RAM_ID = "lamarckian/PongRAM-v0"
ENV_IDS = (IMAGE_ID, RAM_ID)
INSTALL_HINT = 'ALE Pong needs the atari extra (ale-py, opencv): pip install -c constraints.txt -e ".[atari]"'
#: Sticky actions of ALE v5 (Machado et al. 2018): the previous action repeats with this chance.
STICKY_ACTIONS = 0.25


def atari_problem() -> str | None:
    """Why the ALE ids cannot be made here (the install hint), or None when they can."""
    try:
        import ale_py  # noqa: F401
        import cv2  # noqa: F401  (AtariPreprocessing resizes with it)
    except ImportError:
        return INSTALL_HINT
    return None


@functools.cache
def _register_ale() -> None:
    import ale_py

    gym.register_envs(ale_py)


def _ale_pong(obs_type: str, frameskip: int, repeat_action_probability: float,
              render_mode: str | None = None) -> gym.Env:
    problem = atari_problem()
    if problem is not None:
        raise ValueError(problem)
    _register_ale()
    # The bare ALE env: gym.make adds its checker and order wrappers on the outer id already.
    return gym.make("ALE/Pong-v5", obs_type=obs_type, frameskip=frameskip, render_mode=render_mode,
                    repeat_action_probability=repeat_action_probability, disable_env_checker=True).unwrapped


def make_pong_image(frame_stack: int = 4, screen_size: int = 84, noop_max: int = 30,
                    repeat_action_probability: float = STICKY_ACTIONS, render_mode: str | None = None) -> gym.Env:
    """ALE Pong seen as `frame_stack` grey `screen_size`^2 frames, uint8 of shape (stack, size, size)."""
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    if frame_stack < 1:
        raise ValueError(f"frame_stack must be >= 1, got {frame_stack}")
    # AtariPreprocessing reads the grey screen itself; a grey observation below it costs the ALE
    # less per frame than an RGB one, and gives the same frames.
    env = _ale_pong("grayscale", 1, repeat_action_probability, render_mode)
    env = AtariPreprocessing(env, noop_max=noop_max, frame_skip=4, screen_size=screen_size,
                             terminal_on_life_loss=False, grayscale_obs=True, scale_obs=False)
    return FrameStackObservation(env, frame_stack)


class NoopStarts(gym.Wrapper):
    """Between 1 and `noop_max` no-op actions after every reset, drawn from the env's seeded
    generator: AtariPreprocessing's no-op starts for the RAM id, which AtariPreprocessing cannot
    wrap (it reads the screen)."""

    def __init__(self, env: gym.Env, noop_max: int = 30) -> None:
        super().__init__(env)
        if noop_max < 0:
            raise ValueError(f"noop_max must be >= 0, got {noop_max}")
        self.noop_max = noop_max

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        observation, info = self.env.reset(seed=seed, options=options)
        noops = int(self.env.unwrapped.np_random.integers(1, self.noop_max + 1)) if self.noop_max > 0 else 0
        for _ in range(noops):
            observation, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                observation, info = self.env.reset(options=options)
        return observation, info


def make_pong_ram(noop_max: int = 30, repeat_action_probability: float = STICKY_ACTIONS,
                  render_mode: str | None = None) -> gym.Env:
    """ALE Pong seen as the console's 128 bytes of RAM (uint8, shape (128,)), frame skip 4."""
    return NoopStarts(_ale_pong("ram", 4, repeat_action_probability, render_mode), noop_max)


def register() -> None:
    """Make the ALE Pong ids known to gymnasium.make (idempotent; needs no ale-py until made)."""
    for env_id, entry_point in ((IMAGE_ID, "make_pong_image"), (RAM_ID, "make_pong_ram")):
        if env_id not in gym.registry:
            gym.register(env_id, entry_point=f"{__name__}:{entry_point}")
