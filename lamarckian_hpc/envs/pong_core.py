"""The rules of vector Pong, shared by the one-player env and the two-player variant.

The court is the unit square; the left paddle stands at x = 0, the right one at x = 1. The ball
moves a fixed horizontal distance per step and bounces off the top and bottom walls. A paddle that
is at the ball's height when the ball reaches its side returns it, and where it hits the paddle
sets the new vertical speed (centre: flat, edge: steep), so a player can aim. A ball that passes a
paddle is a point for the other side; the ball is then served again from the centre line.

Everything is plain Python floats on purpose: one step is a handful of arithmetic operations, and
numpy's per-call overhead on scalars would cost more than the physics itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

STAY, UP, DOWN = 0, 1, 2
#: Paddle displacement per action (y grows upwards).
ACTION_DIRECTION = (0.0, 1.0, -1.0)


@dataclass(frozen=True)
class PongRules:
    """Sizes and speeds in court units (the court is 1 x 1) per step."""

    paddle_half_height: float = 0.1
    paddle_speed: float = 0.04
    ball_speed: float = 0.03  # horizontal; a rally crosses the court in about 33 steps
    max_ball_vertical_speed: float = 0.045
    serve_vertical_speed: float = 0.015


class PongCore:
    """The state of one game and its step function; no rewards, no observations, no opponent."""

    __slots__ = ("rules", "rng", "ball_x", "ball_y", "ball_vx", "ball_vy", "left_y", "right_y",
                 "left_score", "right_score", "steps", "left_hits", "right_hits")

    def __init__(self, rules: PongRules, rng: np.random.Generator) -> None:
        self.rules = rules
        self.rng = rng
        self.reset()

    def reset(self) -> None:
        self.left_y = self.right_y = 0.5
        self.left_score = self.right_score = 0
        self.steps = self.left_hits = self.right_hits = 0
        self.serve(toward_right=bool(self.rng.random() < 0.5))

    def serve(self, toward_right: bool) -> None:
        """Ball on the centre line at a random height, moving toward one side at a random angle."""
        rules = self.rules
        self.ball_x = 0.5
        self.ball_y = 0.3 + 0.4 * float(self.rng.random())
        self.ball_vx = rules.ball_speed if toward_right else -rules.ball_speed
        self.ball_vy = rules.serve_vertical_speed * (2.0 * float(self.rng.random()) - 1.0)

    def _move_paddle(self, y: float, action: int) -> float:
        half = self.rules.paddle_half_height
        y += ACTION_DIRECTION[action] * self.rules.paddle_speed
        return half if y < half else (1.0 - half if y > 1.0 - half else y)

    def _deflect(self, paddle_y: float) -> float:
        """Vertical speed after a hit: proportional to where the ball met the paddle."""
        offset = (self.ball_y - paddle_y) / self.rules.paddle_half_height
        offset = -1.0 if offset < -1.0 else (1.0 if offset > 1.0 else offset)
        return offset * self.rules.max_ball_vertical_speed

    def step(self, left_action: int, right_action: int) -> int:
        """Advance one step; returns +1 if the right side scored, -1 if the left did, else 0."""
        self.steps += 1
        self.left_y = self._move_paddle(self.left_y, left_action)
        self.right_y = self._move_paddle(self.right_y, right_action)
        x = self.ball_x + self.ball_vx
        y = self.ball_y + self.ball_vy
        if y < 0.0:
            y, self.ball_vy = -y, -self.ball_vy
        elif y > 1.0:
            y, self.ball_vy = 2.0 - y, -self.ball_vy
        self.ball_x, self.ball_y = x, y
        reach = self.rules.paddle_half_height
        if x >= 1.0:
            if abs(y - self.right_y) <= reach:
                self.ball_x, self.ball_vx = 2.0 - x, -self.ball_vx
                self.ball_vy = self._deflect(self.right_y)
                self.right_hits += 1
                return 0
            self.left_score += 1
            self.serve(toward_right=True)  # the side that lost the point receives the serve
            return -1
        if x <= 0.0:
            if abs(y - self.left_y) <= reach:
                self.ball_x, self.ball_vx = -x, -self.ball_vx
                self.ball_vy = self._deflect(self.left_y)
                self.left_hits += 1
                return 0
            self.right_score += 1
            self.serve(toward_right=False)
            return 1
        return 0

    def view(self, side: str) -> np.ndarray:
        """The observation of one side, as if it played on the right: ball x and y, ball velocity
        (in units of the ball's speeds), own paddle y and the other paddle's y, all in about [-1, 1].
        Mirroring makes both sides' observations alike, so one policy can play either side."""
        rules = self.rules
        if side == "right":
            x, vx, own, other = self.ball_x, self.ball_vx, self.right_y, self.left_y
        else:
            x, vx, own, other = 1.0 - self.ball_x, -self.ball_vx, self.left_y, self.right_y
        return np.array((2.0 * x - 1.0, 2.0 * self.ball_y - 1.0, vx / rules.ball_speed,
                         self.ball_vy / rules.max_ball_vertical_speed, 2.0 * own - 1.0, 2.0 * other - 1.0),
                        dtype=np.float32)


def scripted_action(core: PongCore, side: str, skill: float, rng: np.random.Generator) -> int:
    """A built-in player: follows the ball while it comes toward its side, drifts back to the centre
    otherwise. `skill` in [0, 1] is the chance that it moves on a step at all, so a low skill makes
    it slow and beatable by angled returns, and 1 makes it track at full paddle speed."""
    if skill < 1.0 and float(rng.random()) >= skill:
        return STAY
    own = core.left_y if side == "left" else core.right_y
    incoming = core.ball_vx < 0.0 if side == "left" else core.ball_vx > 0.0
    target = core.ball_y if incoming else 0.5
    gap = target - own
    dead_zone = 0.5 * core.rules.paddle_speed
    if gap > dead_zone:
        return UP
    if gap < -dead_zone:
        return DOWN
    return STAY
