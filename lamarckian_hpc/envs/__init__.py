"""Built-in environments: small, fast, pure numpy games that the paper's EvoRL examples need.

Importing this package registers their Gymnasium ids (`lamarckian/Pong-v0`), so `env.id` in a
train config can name them, `lamarckian/Football-v0`, which needs the optional `football` extra,
and ALE Pong's `lamarckian/PongImage-v0` and `lamarckian/PongRAM-v0`, which need the `atari` extra.
"""

from . import atari, football
from .pong import ENV_IDS, PongEnv, register
from .pong_core import PongCore, PongRules, scripted_action
from .pong_two_player import PongTwoPlayer, parallel_env

register()
football.register()
atari.register()

__all__ = ["ENV_IDS", "PongCore", "PongEnv", "PongRules", "PongTwoPlayer", "parallel_env", "register",
           "scripted_action"]
