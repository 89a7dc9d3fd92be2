"""EMOGI: NSGA-II over the weights of behaviour reward terms, each individual a PPO policy.

A genome is a pair of reward weights (see `behaviour`); evaluating it means training a PPO policy
on the vector Pong with that reward (the serial trainer, in one process) and then playing
`evaluation_episodes` episodes to measure its behaviour, whose two objectives NSGA-II ranks.
Offspring may start from their first parent's trained policy (`inherit_weights`), so that later
generations fine-tune a behaviour rather than learn Pong again: the Lamarckian inheritance of
acquired weights.

It runs as a program of the population workflow (`population.workflow`): each generation's
policies train on the workers (in this process, forked, or Ray actors on any node), an evaluation
carrying its parent's policy in and its trained policy out as plain arrays; answers are collected
as each finishes, selection runs once the whole generation is back, and one that fails or outlives
`runtime.timeout_seconds` gets infinite objectives (it never survives) without stopping the
others. `PongBehaviour` is also a plain `ec.Evaluator` (training from scratch) for the evolution
of plain solutions.

The evaluation episodes `storage.trajectories` picks (of each policy: its first, then every N-th)
come back whole with the answer and go to the run file's `/trajectories/main`, each tagged with
the policy's id (as `/population` names it) and the generation.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..config import RunConfig, RuntimeConfig, StopConfig
from ..config.emogi import EMOGIConfig
from ..ec import NSGA2, Coding, Description, non_dominated_fronts
from ..envs import PongEnv
from ..mdp import EpisodeSelector, RecordedSteps
from ..population.worker_pool import Request, WorkerFailure, WorkerPool
from ..population.workflow import GenerationalProgram, GenerationRecord
from ..runtime.run_shape import POLICY_ID
from ..runtime.runners.recording import population_writer_options, tagged_record
from .behaviour import BEHAVIOUR_NAMES, Behaviour, EpisodeTrace, behaviour_of, objectives, reward_terms
from .lockstep import LockstepMembers
from .member import Member

log = logging.getLogger(__name__)

#: The `kind` of an EMOGI run's checkpoint (`runtime.learner.checkpoint.save_run_state`).
CHECKPOINT_KIND = "emogi"
#: Metrics of an EMOGI run, one row per generation.
METRIC_NAMES: tuple[str, ...] = ("front_size", "best_normalized_score", "front_activeness_min",
                                 "front_activeness_max", "evaluation_failures", "generation_seconds")

Weights = dict[str, np.ndarray]


def trajectory_options(config: EMOGIConfig) -> dict[str, Any]:
    """The run file's `/trajectories/main`, the evaluation episodes every policy records (one in
    every `storage.trajectories.every_episodes`, tagged with the policy's id and generation)."""
    env = PongEnv(**{k: v for k, v in config.env.kwargs.items() if k not in ("move_reward", "stay_reward")})
    try:
        return population_writer_options(config.storage, (env.observation_space, env.action_space), POLICY_ID)
    finally:
        env.close()


def individual_run_config(config: EMOGIConfig, genome: np.ndarray, seed: int, env_frames: int) -> RunConfig:
    """The single-run config one policy trains with: the run's env, model and PPO, this genome's
    reward terms, serial on the CPU. Its training episodes are not recorded: the run file records
    evaluation episodes (`play`), played with the plain game's reward."""
    kwargs = {**config.env.kwargs, **reward_terms(genome, config.algorithm.reward_horizon_steps)}
    return RunConfig(
        seed=seed, env=config.env.model_copy(update={"kwargs": kwargs}), model=config.model, algorithm=config.ppo,
        runtime=RuntimeConfig(mode="serial", device="cpu", torch_threads=config.runtime.torch_threads),
        stop=StopConfig(total_env_steps=env_frames), storage=config.storage.model_copy(
            update={"trajectories": config.storage.trajectories.model_copy(update={"every_episodes": 0})}))


def play(model: torch.nn.Module, env_kwargs: dict, episodes: int, seed: int) -> list[EpisodeTrace]:
    """`episodes` episodes of the plain game (no behaviour reward) with the policy's sampled actions,
    stepped in lockstep with one batched forward pass per step. Fixed seeds: every policy of a run
    meets the same serves and the same opponent draws."""
    return play_and_record(model, env_kwargs, episodes, seed)[0]


def play_and_record(model: torch.nn.Module, env_kwargs: dict, episodes: int, seed: int, record_every: int = 0,
                    policy_version: int = 0) -> tuple[list[EpisodeTrace], list[tuple[int, float, RecordedSteps]]]:
    """`play`, and every step of one episode in every `record_every` (the first, then every N-th;
    none for 0) for the run file, as (its index, its return, its steps)."""
    kwargs = {k: v for k, v in env_kwargs.items() if k not in ("move_reward", "stay_reward")}
    envs = [PongEnv(**kwargs) for _ in range(episodes)]
    observations = np.stack([env.reset(seed=seed + k)[0] for k, env in enumerate(envs)])
    selector = EpisodeSelector(record_every)
    tapes = [selector.start() for _ in envs]
    moved: list[list[bool]] = [[] for _ in envs]
    points: list[list[int]] = [[] for _ in envs]
    returns = [0.0] * episodes
    ended = [False] * episodes
    live = list(range(episodes))
    generator_state = torch.get_rng_state()
    torch.manual_seed(seed)
    try:
        with torch.no_grad():
            while live:
                actions, _ = model.act(torch.as_tensor(observations[live]))
                still = []
                for k, action in zip(live, actions.tolist()):
                    acted_on = observations[k].copy()
                    observation, reward, terminated, truncated, info = envs[k].step(int(action))
                    returns[k] += float(reward)
                    if tapes[k] is not None:
                        tapes[k].append(acted_on, int(action), float(reward), policy_version)
                    observations[k] = observation
                    moved[k].append(info["moved"])
                    points[k].append(info["point"])
                    if terminated or truncated:
                        ended[k] = bool(terminated)
                    else:
                        still.append(k)
                live = still
    finally:
        torch.set_rng_state(generator_state)
    traces = [EpisodeTrace(np.array(m, dtype=bool), np.array(p, dtype=np.int64)) for m, p in zip(moved, points)]
    recorded = [(k, returns[k], tape.finish(0, ended[k])) for k, tape in enumerate(tapes) if tape is not None]
    return traces, recorded


@dataclass
class IndividualResult:
    """One trained and measured policy, as a worker returns it (plain arrays, no torch objects)."""

    objectives: np.ndarray
    behaviour: Behaviour
    weights: Weights
    env_frames: int
    wall_time: float
    worker: int
    training_return: float | None  # recent mean return under the genome's own reward
    #: evaluation episodes picked for the run file, as `runtime.runners.recording.recorded_answers` gives them
    recorded: list[dict] = field(default_factory=list)


Job = tuple[np.ndarray, int, int, "Weights | None"]  # genome, seed, env frames, inherited weights


def train_and_evaluate(config: EMOGIConfig, genome: np.ndarray, seed: int, env_frames: int,
                       initial_weights: Weights | None = None) -> IndividualResult:
    """Train a PPO policy with `genome`'s reward (from `initial_weights` if given) and measure it."""
    return train_and_evaluate_together(config, [(genome, seed, env_frames, initial_weights)], batched=False)[0]


def train_and_evaluate_together(config: EMOGIConfig, jobs: list[Job], batched: bool = True) -> list[IndividualResult]:
    """Train several policies, each with its genome's reward (from its inherited weights if any),
    and measure each. With `batched`, those with the same budget train in lockstep (`lockstep`):
    each samples its batch, then one batched PPO step over their stacked parameters updates them
    all, the learning each would do alone (within float rounding)."""
    start = time.perf_counter()
    members = [Member.of_run(individual_run_config(config, genome, seed, frames), index)
               for index, (genome, seed, frames, _) in enumerate(jobs)]
    spec = config.algorithm
    try:
        for member, (_, _, _, weights) in zip(members, jobs):
            if weights is not None:
                member.load_weights(weights)
        budgets = sorted({int(frames) for _, _, frames, _ in jobs})
        for frames in budgets:
            group = [member for member, job in zip(members, jobs) if int(job[2]) == frames]
            if batched and len(group) > 1:
                LockstepMembers(group).train_interval(frames, time.monotonic(), stop_on_target=False)
            else:
                for member in group:
                    member.train_interval(frames, time.monotonic(), stop_on_target=False)
        results = []
        for member in members:
            traces, recorded = play_and_record(member.learner.model, config.env.kwargs, spec.evaluation_episodes,
                                               config.seed * 1_000 + 1, config.storage.trajectories.every_episodes,
                                               member.learner.version)
            behaviour = behaviour_of(traces, int(config.env.kwargs.get("points_to_win", 5)))
            weights = {name: array.copy() for name, array in member.learner.weights().items()}
            results.append(IndividualResult(objectives(behaviour, spec.activeness_objective_weight), behaviour, weights,
                                            member.env_frames, time.perf_counter() - start, os.getpid(),
                                            member.episodes.mean_return,
                                            [{"episode": k, "return": episode_return, "env_frames": member.env_frames,
                                              "steps": steps.to_plain()} for k, episode_return, steps in recorded]))
    finally:
        for member in members:
            member.close()
    return results


class PongBehaviour:
    """EMOGI's problem as an `ec.Evaluator`: genomes are reward weights, objectives -f1, -f2 of a
    policy trained from scratch with them (for the generic evolution driver)."""

    def __init__(self, config: EMOGIConfig) -> None:
        self.config = config

    def describe(self) -> Description:
        low, high = self.config.algorithm.weight_bounds
        return Description("emogi-pong", Coding.real(np.full(2, low), np.full(2, high)), 2)

    def initialize(self, rng: np.random.Generator, count: int) -> np.ndarray:
        return self.describe().coding.sample(rng, count)

    def evaluate(self, genomes: np.ndarray) -> np.ndarray:
        frames = self.config.algorithm.initial_env_frames
        return np.array([train_and_evaluate(self.config, genome, self.config.seed, frames).objectives
                         for genome in np.atleast_2d(genomes)])


@dataclass
class Individual:
    """One evaluated policy of the run's history."""

    generation: int
    id: int
    parent_ids: tuple[int, int]
    genome: np.ndarray
    objectives: np.ndarray  # inf when its training failed
    behaviour: Behaviour | None
    env_frames: int
    wall_time: float
    worker: int


@dataclass
class EMOGIResult:
    history: list[Individual] = field(default_factory=list)
    policies: dict[int, Weights] = field(default_factory=dict)
    population_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    front_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    wall_time: float = 0.0

    def individual(self, identifier: int) -> Individual:
        return next(member for member in self.history if member.id == identifier)

    @property
    def front(self) -> list[Individual]:
        return [self.individual(int(identifier)) for identifier in self.front_ids]


def individual_seed(seed: int, generation: int, index: int) -> int:
    return seed * 100_003 + generation * 1_009 + index


def _individual_state(member: Individual) -> dict:
    return {"generation": member.generation, "id": member.id, "parent_ids": list(member.parent_ids),
            "genome": member.genome, "objectives": member.objectives, "env_frames": member.env_frames,
            "behaviour": None if member.behaviour is None else member.behaviour.as_row(),
            "wall_time": float(member.wall_time), "worker": member.worker}


def _individual(state: dict) -> Individual:
    row = state["behaviour"]
    behaviour = None if row is None else Behaviour(**dict(zip(BEHAVIOUR_NAMES, map(float, row))))
    first, second = (int(parent) for parent in state["parent_ids"])
    return Individual(int(state["generation"]), int(state["id"]), (first, second), np.asarray(state["genome"], float),
                      np.asarray(state["objectives"], float), behaviour, int(state["env_frames"]),
                      float(state["wall_time"]), int(state["worker"]))


def run_state(generations: int, nsga: NSGA2, result: EMOGIResult) -> dict:
    """What a resumed run needs after `generations` complete generations, as arrays and numbers:
    NSGA-II's state, every policy's weights, the history and the current front."""
    return {"generations": generations, "nsga": nsga.state_dict(), "policies": result.policies,
            "history": [_individual_state(member) for member in result.history],
            "population_ids": result.population_ids, "front_ids": result.front_ids, "wall_time": result.wall_time}


def result_of(state: dict) -> EMOGIResult:
    """The result so far of a run whose `run_state` this is."""
    return EMOGIResult([_individual(member) for member in state["history"]],
                       {int(k): dict(weights) for k, weights in state["policies"].items()},
                       np.asarray(state["population_ids"], np.int64), np.asarray(state["front_ids"], np.int64),
                       float(state["wall_time"]))


class PolicyTrainer:
    """What a worker of an EMOGI run hosts: it trains and measures the policies of a request."""

    def __init__(self, config: EMOGIConfig, slots: list[int]) -> None:
        self.config = config
        torch.set_num_threads(config.runtime.torch_threads)

    def train_and_evaluate(self, genome: np.ndarray, seed: int, env_frames: int,
                           initial_weights: Weights | None) -> dict[str, Any]:
        """`IndividualResult` as plain data (the behaviour as its row)."""
        return self.train_and_evaluate_all([[genome, seed, env_frames, initial_weights]])[0]

    def train_and_evaluate_all(self, jobs: list[list[Any]]) -> list[dict[str, Any]]:
        """Several policies (`train_and_evaluate_together`, batched as `runtime.batched_updates` says)."""
        results = train_and_evaluate_together(
            self.config, [(np.asarray(genome, float), int(seed), int(frames), weights)
                          for genome, seed, frames, weights in jobs], self.config.runtime.batched_updates)
        return [{**dataclasses.asdict(result), "behaviour": result.behaviour.as_row()} for result in results]


def individual_result(answer: dict[str, Any]) -> IndividualResult:
    row = np.asarray(answer["behaviour"], float)
    return IndividualResult(**{**answer, "behaviour": Behaviour(**dict(zip(BEHAVIOUR_NAMES, map(float, row)))),
                               "objectives": np.asarray(answer["objectives"], float)})


class EMOGIProgram(GenerationalProgram):
    """EMOGI for the population workflow. `on_individual(generation, index, result)` hears of each
    policy as soon as it is trained and measured (None where its training failed)."""

    kind = CHECKPOINT_KIND
    metric_names = METRIC_NAMES

    def __init__(self, config: EMOGIConfig,
                 on_individual: Callable[[int, int, IndividualResult | None], None] | None = None) -> None:
        self.config, self.on_individual = config, on_individual
        spec = config.algorithm
        low, high = spec.weight_bounds
        self.nsga = NSGA2(np.full(2, low), np.full(2, high), spec.population_size, np.random.default_rng(config.seed),
                          spec.crossover_eta, spec.crossover_probability, spec.mutation_eta)
        self.result = EMOGIResult()
        self.generation = 0
        self.behaviours: dict[int, np.ndarray] = {}
        self.genomes = np.zeros((0, 2))
        self.groups: list[list[int]] = []  # the generation's policies of each request
        self._pool: WorkerPool | None = None  # its workers may change between generations (`pool_growth`)

    def start(self, pool: WorkerPool) -> None:
        self._pool = pool

    def host_factory(self) -> Callable[[list[int]], PolicyTrainer]:
        return functools.partial(PolicyTrainer, self.config)

    def ask(self) -> list[Request]:
        spec = self.config.algorithm
        self.genomes = self.nsga.ask()
        # NSGA-II names each offspring's parents at ask time; the first parent's policy is inherited.
        parents = np.asarray(self.nsga.asked_parent_ids)
        jobs = []
        for index, genome in enumerate(self.genomes):
            inherited = self.result.policies.get(int(parents[index, 0])) if spec.inherit_weights else None
            frames = spec.initial_env_frames if inherited is None else spec.offspring_env_frames
            jobs.append([genome, individual_seed(self.config.seed, self.generation, index), frames, inherited])
        # Batched: one request per worker, whose policies train in lockstep; else one per policy.
        assert self._pool is not None, "start() is given the pool"
        share = self._pool.num_workers if self.config.runtime.batched_updates else len(jobs)
        self.groups = [group for group in (list(range(k, len(jobs), share)) for k in range(share)) if group]
        return [Request("train_and_evaluate_all", ([jobs[k] for k in group],)) for group in self.groups]

    def on_answer(self, index: int, answer: Any) -> None:
        if self.on_individual is not None:
            for position, job in enumerate(self.groups[index]):
                failed = isinstance(answer, WorkerFailure)
                self.on_individual(self.generation, job, None if failed else individual_result(answer[position]))

    def tell(self, answers: list[Any], pool: WorkerPool, wall_time: float) -> GenerationRecord:
        nsga, genomes, generation = self.nsga, self.genomes, self.generation
        outcomes: list[IndividualResult | None] = [None] * len(genomes)
        for group, answer in zip(self.groups, answers):
            if isinstance(answer, WorkerFailure):
                log.error("training of genomes %s failed: %s", genomes[group].tolist(), answer.reason)
                continue
            for job, fields in zip(group, answer):
                outcomes[job] = individual_result(fields)
        objective_rows = np.array([np.full(2, np.inf) if o is None else o.objectives for o in outcomes])
        nsga.tell(genomes, objective_rows)
        assert nsga.told_ids is not None and nsga.told_parent_ids is not None and nsga.ids is not None
        individuals = []
        for k, outcome in enumerate(outcomes):
            identifier = int(nsga.told_ids[k])
            if outcome is not None:
                self.result.policies[identifier] = outcome.weights
                self.behaviours[identifier] = outcome.behaviour.as_row()
            individuals.append(Individual(
                generation, identifier, (int(nsga.told_parent_ids[k, 0]), int(nsga.told_parent_ids[k, 1])),
                genomes[k], objective_rows[k], None if outcome is None else outcome.behaviour,
                0 if outcome is None else outcome.env_frames, np.nan if outcome is None else outcome.wall_time,
                -1 if outcome is None else outcome.worker))
        self.result.history += individuals
        assert nsga.objectives is not None
        finite = np.isfinite(nsga.objectives).all(axis=1)
        first = non_dominated_fronts(nsga.objectives[finite])[0] if finite.any() else np.zeros(0, dtype=int)
        self.result.population_ids = nsga.ids.copy()
        self.result.front_ids = np.sort(nsga.ids[finite][first])
        seconds, self.result.wall_time = wall_time - self.result.wall_time, wall_time
        self.generation += 1
        episodes = []
        for k, outcome in enumerate(outcomes):
            if outcome is None:
                continue
            # Any idle worker answers: the pid it sent says which (its host, from the pool).
            worker = pool.pids.index(outcome.worker) if outcome.worker in pool.pids else -1
            host = pool.host_names[worker] if worker >= 0 else ""
            episodes += [tagged_record(POLICY_ID, recorded, worker, host, wall_time, int(nsga.told_ids[k]), generation)
                         for recorded in outcome.recorded]
        return dataclasses.replace(self._record(individuals, sum(o is None for o in outcomes), seconds),
                                   episodes=tuple(episodes))

    def _record(self, members: list[Individual], failures: int, seconds: float) -> GenerationRecord:
        """The generation's population rows, metrics (the front's scores and activeness) and line."""
        rows = {"generation": np.full(len(members), members[0].generation), "id": np.array([m.id for m in members]),
                "parent_ids": np.array([m.parent_ids for m in members]), "genome": np.array([m.genome for m in members]),
                "objectives": np.array([m.objectives for m in members]),
                "wall_time": np.array([m.wall_time for m in members]), "worker": np.array([m.worker for m in members]),
                "env_frames": np.array([m.env_frames for m in members])}
        front_ids = self.result.front_ids
        front = np.array([self.behaviours[int(i)] for i in front_ids if int(i) in self.behaviours])
        scores = front[:, 0] if len(front) else np.array([np.nan])
        activeness = front[:, 1] if len(front) else np.array([np.nan])
        metrics = {"front_size": float(len(front_ids)), "best_normalized_score": float(np.max(scores)),
                   "front_activeness_min": float(np.min(activeness)), "front_activeness_max": float(np.max(activeness)),
                   "evaluation_failures": float(failures), "generation_seconds": seconds}
        line = (f"generation {self.generation}/{self.config.algorithm.generations}  front {len(front_ids)}  "
                f"score {np.min(scores):.2f}-{np.max(scores):.2f}  "
                f"activeness {np.min(activeness):.2f}-{np.max(activeness):.2f}  failures {failures}  "
                f"{self.result.wall_time:.0f}s")
        return GenerationRecord(metrics, sum(m.env_frames for m in members), rows, line)

    def state_dict(self) -> dict[str, Any]:
        return run_state(self.generation, self.nsga, self.result)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.nsga.load_state_dict(state["nsga"])
        self.result, self.generation = result_of(state), int(state["generations"])
        self.behaviours = {m.id: m.behaviour.as_row() for m in self.result.history if m.behaviour is not None}

    def mismatch(self, state: dict[str, Any]) -> str | None:
        size, saved = self.config.algorithm.population_size, len(state["program"]["population_ids"])
        if saved != size:
            return f"algorithm.population_size is {size}, the saved run's population has {saved}"
        return None
