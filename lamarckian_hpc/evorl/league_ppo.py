"""AlphaStar's league of PPO learners as a program of the population workflow
(`population.workflow`): main agents, main exploiters and league exploiters learn at once, each on
a worker (in this process, forked, or a Ray actor on any node of the cluster, `league_learners`).

A generation is one PPO update of every learner. The league (`league.League`) chooses each
learner's opponent for it, as AlphaStar's matchmaking does: a main agent plays the current main
agents (self-play, `league.self_play_fraction`) or a snapshot chosen by PFSP with f_hard; a main
exploiter plays a main agent, or that agent's snapshots with f_var while it still loses nearly
every game; a league exploiter plays snapshots with f_hard. The opponent's weights travel with
the request. The games each learner finished against its opponent come back as one match result,
recorded in the payoff matrix and the Elo ratings; the league then adds snapshots and resets
exploiters on its schedule (a reset learner starts again from the initial weights with a fresh
optimizer). Every `algorithm.scripted_evaluation_interval` generations the main agents play the
scripted player they never train against (Pong's, or a random legal player of the game). `/league`
in the run file holds the members, payoff, Elo (and its history) and every match; the metrics hold
each learner's Elo and return; `/trajectories/<learner>` the games `storage.trajectories` picks,
tagged with the learner's slot, the generation and the opponent's name.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..config.league_run import LeagueRunConfig
from ..league.league import League, Role
from ..league.store import MATCH_COLUMNS, LeagueRunWriter, elo_row
from ..population.worker_pool import Request, WorkerError, WorkerFailure, WorkerPool
from ..population.workflow import GenerationalProgram, GenerationRecord
from ..runtime.runners.recording import population_writer_options, tagged_record
from ..storage.trajectories import EpisodeRecord
from .league_learners import LeagueLearners, initial_weights, learner_spaces

#: The `kind` of a league run's checkpoint (`runtime.learner.checkpoint.save_run_state`).
CHECKPOINT_KIND = "league"
SCRIPTED_EVALUATION_SEED = 10_000


def learner_names(config: LeagueRunConfig) -> list[str]:
    """The learners in the league's order (`League` adds them so: mains, main exploiters, league exploiters)."""
    league = config.league
    return ([f"main_{k}" for k in range(league.main_agents)] + [f"main_exploiter_{k}" for k in range(league.main_exploiters)]
            + [f"league_exploiter_{k}" for k in range(league.league_exploiters)])


def trajectory_options(config: LeagueRunConfig) -> dict[str, Any]:
    """The run file's `/trajectories/<learner>`, one group per learner, when
    `storage.trajectories.every_episodes` records any of their games."""
    return population_writer_options(config.storage, learner_spaces(config), *learner_names(config))


def metric_names(config: LeagueRunConfig) -> tuple[str, ...]:
    names = learner_names(config)
    return (*(f"elo_{name}" for name in names), *(f"return_{name}" for name in names),
            *(f"win_rate_vs_targets_{name}" for name in names if "exploiter" in name),
            "main_score_vs_scripted", "main_win_rate_vs_scripted", "illegal_actions", "league_members",
            "snapshots_added", "resets", "generation_seconds")


class LeagueProgram(GenerationalProgram):
    kind = CHECKPOINT_KIND

    def __init__(self, config: LeagueRunConfig) -> None:
        self.config = config
        self.names = learner_names(config)
        self.metric_names = metric_names(config)
        self.num_slots = len(self.names)
        self.initial = initial_weights(config)
        self.league = League(config.league, self.initial, seed=config.seed)
        self.generation, self.wall_time = 0, 0.0
        self.chosen: list[tuple[int, str]] = []
        self.history: list[tuple[int, np.ndarray]] = []  # (league update count, Elo row) per generation
        self.matches: list[list[int]] = []  # MATCH_COLUMNS rows
        self.scripted_scores: list[tuple[int, float]] = []  # (generation, mean score of the main agents)
        self.written = (0, 0)  # history rows and matches already in this process's run file
        self.last_metrics: dict[str, float] = {}
        self._pool: WorkerPool | None = None

    def host_factory(self) -> Callable[[list[int]], LeagueLearners]:
        return functools.partial(LeagueLearners, self.config)

    def start(self, pool: WorkerPool) -> None:
        self._pool = pool

    def _scripted_due(self) -> bool:
        every = self.config.algorithm.scripted_evaluation_interval
        return every > 0 and (self.generation + 1) % every == 0

    def ask(self) -> list[Request]:
        assert self._pool is not None
        self.chosen = [self.league.choose_opponent(learner) for learner in range(self.num_slots)]
        weights = [None if opponent == learner else self.league.members[opponent].params
                   for learner, (opponent, _) in enumerate(self.chosen)]
        requests = [Request("update_all", ([weights[slot] for slot in slots],), worker)
                    for worker, slots in enumerate(self._pool.slots)]
        if self._scripted_due():  # after this generation's updates: the worker answers in order
            episodes = self.config.algorithm.scripted_evaluation_episodes
            requests += [Request("score_against_scripted", (main, episodes, SCRIPTED_EVALUATION_SEED),
                                 self._pool.worker_of(main)) for main in self.league.of_role(Role.MAIN_AGENT)]
        return requests

    def tell(self, answers: list[Any], pool: WorkerPool, wall_time: float) -> GenerationRecord:
        for answer in answers:  # a learner's weights died with its worker: the run cannot go on
            if isinstance(answer, WorkerFailure):
                raise WorkerError(f"league worker {answer.pid} (learners {pool.slots[answer.worker]}): {answer.reason}")
        workers = pool.num_workers
        updates: list[dict] = [{}] * self.num_slots
        for slots, batch in zip(pool.slots, answers[:workers]):
            for slot, answer in zip(slots, batch):
                updates[slot] = answer
        scripted = [score for score, _ in answers[workers:]]
        scripted_wins = [win_rate for _, win_rate in answers[workers:]]
        league, snapshots, resets = self.league, 0, []
        for learner, ((opponent, _), answer) in enumerate(zip(self.chosen, updates)):
            league.record(learner, opponent, answer["wins"], answer["draws"], answer["losses"])
            self.matches.append([league.update_count, learner, opponent, answer["wins"], answer["draws"],
                                 answer["losses"]])
            for event in league.after_update(learner, answer["weights"]):
                snapshots += event.kind == "snapshot"
                if event.kind == "reset":
                    resets.append(event.learner)
        if resets:
            pool.gather([Request("reset", (learner, self.initial), pool.worker_of(learner)) for learner in resets])
        if scripted:
            self.scripted_scores.append((self.generation, float(np.mean(scripted))))
        episodes = tuple(self._recorded(updates, pool, wall_time))
        self.history.append((league.update_count, elo_row(league)))
        metrics = self.last_metrics = self._metrics(updates, scripted, snapshots, len(resets), wall_time - self.wall_time)
        metrics["main_win_rate_vs_scripted"] = float(np.mean(scripted_wins)) if scripted_wins else math.nan
        # moves outside the legal-action mask in every learner's games so far (turn-based games; 0 elsewhere)
        metrics["illegal_actions"] = float(sum(answer.get("illegal_actions", 0) for answer in updates))
        frames = sum(answer["env_frames"] for answer in updates)
        line = (f"generation {self.generation + 1}/{self.config.algorithm.generations}  "
                + "  ".join(f"{name} elo {league.elo[k]:.0f}" for k, name in enumerate(self.names))
                + (f"  main vs scripted {np.mean(scripted):+.2f}" if scripted else "")
                + f"  members {len(league.members)}  {wall_time:.0f}s")
        self.generation, self.wall_time = self.generation + 1, wall_time
        return GenerationRecord(metrics, frames, line=line, write=self._write, episodes=episodes)

    def _recorded(self, updates: list[dict], pool: WorkerPool, wall_time: float) -> Iterator[EpisodeRecord]:
        """The games each learner recorded this generation, in its policy's group, tagged with its
        slot, the generation and the opponent it played (the league member's name)."""
        for learner, ((opponent, _), answer) in enumerate(zip(self.chosen, updates)):
            worker = pool.worker_of(learner)
            for recorded in answer.get("recorded", ()):
                yield tagged_record(self.names[learner], recorded, worker, pool.host_names[worker], wall_time, learner,
                                    self.generation, self.league.members[opponent].name)

    def _metrics(self, updates: list[dict], scripted: list[float], snapshots: int, resets: int,
                 seconds: float) -> dict[str, float]:
        league = self.league
        metrics: dict[str, float] = {}
        for k, (name, answer) in enumerate(zip(self.names, updates)):
            metrics[f"elo_{name}"] = float(league.elo[k])
            metrics[f"return_{name}"] = math.nan if answer["return_mean"] is None else float(answer["return_mean"])
            if "exploiter" in name:  # what it must beat: the main agents, or (a league exploiter) every snapshot
                targets = league.of_role(Role.MAIN_AGENT if league.members[k].role == Role.MAIN_EXPLOITER
                                         else Role.SNAPSHOT)
                metrics[f"win_rate_vs_targets_{name}"] = float(np.mean(league.payoff.win_rate(k, targets)))
        metrics.update({"main_score_vs_scripted": float(np.mean(scripted)) if scripted else math.nan,
                        "league_members": float(len(league.members)), "snapshots_added": float(snapshots),
                        "resets": float(resets), "generation_seconds": seconds})
        return metrics

    def _write(self, writer: LeagueRunWriter) -> None:
        """The league as it is now, and the history rows and matches this run file lacks."""
        rows, matches = self.written
        writer.write_league(self.league, self.history[rows:], np.array(self.matches[matches:], np.int64), flush=False)
        self.written = (len(self.history), len(self.matches))

    def state_dict(self) -> dict[str, Any]:
        return {"generation": self.generation, "wall_time": self.wall_time, "league": self.league.state_dict(),
                "history_updates": np.array([update for update, _ in self.history], np.int64),
                "history_elo": np.array([row for _, row in self.history]).reshape(-1, self.config.league.capacity),
                "matches": np.array(self.matches, np.int64).reshape(-1, len(MATCH_COLUMNS)),
                "scripted_scores": [list(entry) for entry in self.scripted_scores]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.generation, self.wall_time = int(state["generation"]), float(state["wall_time"])
        self.league.load_state_dict(state["league"])
        self.history = [(int(update), np.asarray(row, float))
                        for update, row in zip(state["history_updates"], state["history_elo"])]
        self.matches = np.asarray(state["matches"], np.int64).tolist()
        self.scripted_scores = [(int(generation), float(score)) for generation, score in state["scripted_scores"]]
        self.written = (0, 0)  # a resumed run writes a new run file: everything goes in again

    def mismatch(self, state: dict[str, Any]) -> str | None:
        saved = len(state["members"])
        if saved != self.num_slots:
            return f"the league config has {self.num_slots} learners, the saved run {saved}"
        capacity = np.shape(state["program"]["history_elo"])[1] if len(state["program"]["history_elo"]) else None
        if capacity not in (None, self.config.league.capacity):
            return f"league.capacity is {self.config.league.capacity}, the saved run's {capacity}"
        return None
