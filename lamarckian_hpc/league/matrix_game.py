"""A non-transitive matrix game to show what a league buys over naive self-play.

Each player is a mixed strategy, softmax(logits) over the actions of a symmetric zero-sum game
with payoff matrix A (the row player gets A[a, b]); rock-paper-scissors and its biased variant
are non-transitive: every pure strategy is beaten by another. A player learns by the exact
policy gradient of its expected payoff against one opponent per update:
    d/d logits of pi^T A sigma = pi * (A sigma - pi^T A sigma).
Naive self-play (sigma = pi) chases its own best response and circles the equilibrium, spiralling
out; a league main agent trains against PFSP-chosen snapshots and the best responses of its
exploiters, and its exploitability, max_a (A pi)_a (what a best response wins against it; 0 at
the Nash equilibrium), falls.

Everything is numpy and seeded: a run takes milliseconds per thousand updates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..config import LeagueConfig
from .league import League, Role

ROCK_PAPER_SCISSORS = np.array([[0, -1, 1], [1, 0, -1], [-1, 1, 0]], dtype=np.float64)
#: Rock beats scissors by 2: the equilibrium is (1/4, 1/2, 1/4), not uniform.
BIASED_ROCK_PAPER_SCISSORS = np.array([[0, -1, 2], [1, 0, -1], [-2, 1, 0]], dtype=np.float64)


def softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max())
    return e / e.sum()


def exploitability(payoff: np.ndarray, policy: np.ndarray) -> float:
    """What a best response wins on average against `policy` (0 at the equilibrium of a symmetric zero-sum game)."""
    return float((payoff @ policy).max())


def outcome_probabilities(payoff: np.ndarray, policy: np.ndarray, opponent: np.ndarray) -> tuple[float, float, float]:
    """Probabilities that `policy` wins, draws and loses one game against `opponent`."""
    joint = np.outer(policy, opponent)
    return float(joint[payoff > 0].sum()), float(joint[payoff == 0].sum()), float(joint[payoff < 0].sum())


def outcome_table(payoff: np.ndarray, policy: np.ndarray, opponents: np.ndarray) -> tuple[np.ndarray, ...]:
    """`outcome_probabilities` against each row of `opponents` [n, actions] at once."""
    return tuple(opponents @ (policy @ mask) for mask in
                 ((payoff > 0).astype(float), (payoff == 0).astype(float), (payoff < 0).astype(float)))


def policy_gradient_step(logits: np.ndarray, opponent: np.ndarray, payoff: np.ndarray, learning_rate: float) -> np.ndarray:
    policy = softmax(logits)
    values = payoff @ opponent
    return logits + learning_rate * policy * (values - policy @ values)


@dataclass
class MatrixGameRun:
    exploitability: list[float] = field(default_factory=list)  # the main (or self-play) policy after each update
    policies: list[np.ndarray] = field(default_factory=list)

    def window_means(self, windows: int) -> list[float]:
        chunks = np.array_split(np.asarray(self.exploitability), windows)
        return [float(chunk.mean()) for chunk in chunks]

    def cycles(self) -> int:
        """How often the most likely action changed: a policy that circles the equilibrium keeps switching."""
        favourite = [int(np.argmax(p)) for p in self.policies]
        return sum(a != b for a, b in zip(favourite, favourite[1:]))


def self_play(payoff: np.ndarray, initial_logits: np.ndarray, updates: int, learning_rate: float) -> MatrixGameRun:
    """Naive self-play: each update is a policy-gradient step against the current self."""
    run, logits = MatrixGameRun(), np.array(initial_logits, dtype=np.float64)
    for _ in range(updates):
        logits = policy_gradient_step(logits, softmax(logits), payoff, learning_rate)
        run.exploitability.append(exploitability(payoff, softmax(logits)))
        run.policies.append(softmax(logits))
    return run


def league_training(payoff: np.ndarray, initial_logits: np.ndarray, updates: int, learning_rate: float,
                    config: LeagueConfig, seed: int = 0, exploiter_learning_rate: float | None = None,
                    on_round: Callable[[League, int], None] | None = None) -> tuple[MatrixGameRun, League]:
    """`updates` rounds; in each, every learner first plays an evaluation game against every frozen
    member (its expected outcome goes into the payoff matrix, so PFSP weighs current win rates:
    cheap here, where a game is a dot product), then plays one opponent chosen by the league and
    takes one policy-gradient step against it. Exploiters learn at `exploiter_learning_rate`
    (default 3x the main agents': they must find a best response within their schedule)."""
    league = League(config, np.array(initial_logits, dtype=np.float64), seed=seed)
    exploiter_rate = exploiter_learning_rate or 3 * learning_rate
    run = MatrixGameRun()
    main = league.of_role(Role.MAIN_AGENT)[0]
    frozen_policies: list[np.ndarray] = []
    for round_index in range(updates):
        for learner in league.learners:
            policy = softmax(league.members[learner].params)
            frozen = league.snapshots
            while len(frozen_policies) < len(frozen):  # snapshots never change: their softmax is kept
                frozen_policies.append(softmax(league.members[frozen[len(frozen_policies)]].params))
            league.record(learner, np.asarray(frozen), *outcome_table(payoff, policy, np.stack(frozen_policies)))
            opponent, _ = league.choose_opponent(learner)
            opponent_policy = softmax(league.members[opponent].params)
            rate = learning_rate if league.members[learner].role == Role.MAIN_AGENT else exploiter_rate
            league.after_update(learner, policy_gradient_step(league.members[learner].params, opponent_policy,
                                                              payoff, rate))
        main_policy = softmax(league.members[main].params)
        run.exploitability.append(exploitability(payoff, main_policy))
        run.policies.append(main_policy)
        if on_round is not None:
            on_round(league, round_index)
    return run, league
