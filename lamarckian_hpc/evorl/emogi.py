"""EMOGI: NSGA-II over the weights of behaviour reward terms, each individual a PPO policy.

A genome is a pair of reward weights (see `behaviour`); evaluating it means training a PPO policy
on the vector Pong with that reward (the serial trainer, in one process) and then playing
`evaluation_episodes` episodes to measure its behaviour, whose two objectives NSGA-II ranks.
Offspring may start from their first parent's trained policy (`inherit_weights`), so that later
generations fine-tune a behaviour rather than learn Pong again: the Lamarckian inheritance of
acquired weights.

Evaluations run in this process or as Ray tasks, collected as each one finishes; selection runs
once the whole generation is back, and one that fails or times out gets infinite objectives (it
never survives) without stopping the others. This module has its own dispatch rather than the
generic driver of `runtime.evolution` because an evaluation here carries a parent's policy in and
its trained policy out, which `Evaluator.evaluate(genomes) -> objectives` cannot; `PongBehaviour`
is still a plain `ec.Evaluator` (training from scratch) for that driver.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np
import torch

from ..config import RunConfig, RuntimeConfig, StopConfig
from ..config.emogi import EMOGIConfig
from ..ec import NSGA2, Coding, Description, non_dominated_fronts
from ..envs import PongEnv
from ..runtime.learner import load_weights
from ..runtime.ray_setup import ensure_ray
from ..runtime.trainer import SerialTrainer
from .behaviour import BEHAVIOUR_NAMES, Behaviour, EpisodeTrace, behaviour_of, objectives, reward_terms

log = logging.getLogger(__name__)

Weights = dict[str, np.ndarray]


def individual_run_config(config: EMOGIConfig, genome: np.ndarray, seed: int, env_frames: int) -> RunConfig:
    """The single-run config one policy trains with: the run's env, model and PPO, this genome's
    reward terms, serial on the CPU."""
    kwargs = {**config.env.kwargs, **reward_terms(genome, config.algorithm.reward_horizon_steps)}
    return RunConfig(
        seed=seed, env=config.env.model_copy(update={"kwargs": kwargs}), model=config.model, algorithm=config.ppo,
        runtime=RuntimeConfig(mode="serial", device="cpu", torch_threads=config.runtime.torch_threads),
        stop=StopConfig(total_env_steps=env_frames), storage=config.storage)


def play(model: torch.nn.Module, env_kwargs: dict, episodes: int, seed: int) -> list[EpisodeTrace]:
    """`episodes` episodes of the plain game (no behaviour reward) with the policy's sampled actions,
    stepped in lockstep with one batched forward pass per step. Fixed seeds: every policy of a run
    meets the same serves and the same opponent draws."""
    kwargs = {k: v for k, v in env_kwargs.items() if k not in ("move_reward", "stay_reward")}
    envs = [PongEnv(**kwargs) for _ in range(episodes)]
    observations = np.stack([env.reset(seed=seed + k)[0] for k, env in enumerate(envs)])
    moved: list[list[bool]] = [[] for _ in envs]
    points: list[list[int]] = [[] for _ in envs]
    live = list(range(episodes))
    generator_state = torch.get_rng_state()
    torch.manual_seed(seed)
    try:
        with torch.no_grad():
            while live:
                actions, _ = model.act(torch.as_tensor(observations[live]))
                still = []
                for k, action in zip(live, actions.tolist()):
                    observation, _, terminated, truncated, info = envs[k].step(int(action))
                    observations[k] = observation
                    moved[k].append(info["moved"])
                    points[k].append(info["point"])
                    if not (terminated or truncated):
                        still.append(k)
                live = still
    finally:
        torch.set_rng_state(generator_state)
    return [EpisodeTrace(np.array(m, dtype=bool), np.array(p, dtype=np.int64)) for m, p in zip(moved, points)]


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


def train_and_evaluate(config: EMOGIConfig, genome: np.ndarray, seed: int, env_frames: int,
                       initial_weights: Weights | None = None) -> IndividualResult:
    """Train a PPO policy with `genome`'s reward (from `initial_weights` if given) and measure it."""
    start = time.perf_counter()
    run_config = individual_run_config(config, genome, seed, env_frames)
    trainer = SerialTrainer(run_config)
    try:
        if initial_weights is not None:
            load_weights(trainer.learner.model, initial_weights)
        result = trainer.train()
        model = trainer.learner.model
        weights = {name: array.copy() for name, array in trainer.learner.weights().items()}
        spec = config.algorithm
        traces = play(model, config.env.kwargs, spec.evaluation_episodes, seed=config.seed * 1_000 + 1)
    finally:
        trainer.close()
    behaviour = behaviour_of(traces, int(config.env.kwargs.get("points_to_win", 5)))
    return IndividualResult(objectives(behaviour, spec.activeness_objective_weight), behaviour, weights,
                            result.env_frames, time.perf_counter() - start, os.getpid(), result.recent_return_mean)


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


@dataclass(frozen=True)
class Job:
    genome: np.ndarray
    seed: int
    env_frames: int
    initial_weights: Weights | None


#: Called as each job of a generation finishes: (job index, its result or None if it failed).
JobHook = Callable[[int, "IndividualResult | None"], None]


class Backend(Protocol):
    def run(self, jobs: list[Job], on_done: JobHook | None = None) -> list[IndividualResult | None]: ...

    def close(self) -> None: ...


class SerialBackend:
    def __init__(self, config: EMOGIConfig) -> None:
        self.config = config
        torch.set_num_threads(config.runtime.torch_threads)

    def run(self, jobs: list[Job], on_done: JobHook | None = None) -> list[IndividualResult | None]:
        results: list[IndividualResult | None] = []
        for index, job in enumerate(jobs):
            try:
                results.append(train_and_evaluate(self.config, job.genome, job.seed, job.env_frames, job.initial_weights))
            except Exception as error:  # a failed evaluation must not stop the generation
                log.error("training of genome %s failed: %s", job.genome, error)
                results.append(None)
            if on_done is not None:
                on_done(index, results[-1])
        return results

    def close(self) -> None:
        pass


class RayBackend:
    """Each policy trains in its own Ray task (one core); results are gathered as they complete."""

    def __init__(self, config: EMOGIConfig) -> None:
        import ray

        self.ray = ray
        self.started_ray = ensure_ray(config.runtime.ray_address, config.runtime.num_workers or os.cpu_count() or 1)
        # SPREAD: on a multi-node cluster the policies train on every node, not first on the driver's.
        self.task = ray.remote(num_cpus=1, max_retries=0, scheduling_strategy="SPREAD")(train_and_evaluate)
        self.config_ref = ray.put(config)
        self.timeout_seconds = config.runtime.evaluation_timeout_seconds

    def run(self, jobs: list[Job], on_done: JobHook | None = None) -> list[IndividualResult | None]:
        ray = self.ray
        pending = {self.task.remote(self.config_ref, job.genome, job.seed, job.env_frames, job.initial_weights): index
                   for index, job in enumerate(jobs)}
        results: list[IndividualResult | None] = [None] * len(jobs)
        deadline = time.monotonic() + self.timeout_seconds
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
            if not done:  # stragglers ran out of time: cancel them, they count as failed
                for reference in pending:
                    ray.cancel(reference, force=True)
                log.error("%d trainings timed out after %.0f s", len(pending), self.timeout_seconds)
                break
            for reference in done:
                index = pending.pop(reference)
                try:
                    results[index] = ray.get(reference)
                except Exception as error:
                    log.error("training of individual %d failed: %s", index, error)
                if on_done is not None:
                    on_done(index, results[index])
        return results

    def close(self) -> None:
        if self.started_ray:
            from ..runtime.ray_setup import shutdown_ray

            shutdown_ray()


def make_backend(config: EMOGIConfig) -> Backend:
    return SerialBackend(config) if config.runtime.mode == "serial" else RayBackend(config)


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
class GenerationReport:
    generation: int
    individuals: list[Individual]
    front_ids: np.ndarray  # non-dominated members of the population after selection
    failures: int
    wall_time: float  # seconds since the run started


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


def run_emogi(config: EMOGIConfig, on_generation: Callable[[GenerationReport], None] | None = None,
              backend: Backend | None = None, on_individual: Callable[[int, int, IndividualResult | None], None]
              | None = None, on_state: Callable[[dict], None] | None = None,
              resume: dict | None = None) -> EMOGIResult:
    """Evolve `algorithm.generations` generations; the result holds every policy's history and
    weights and the final non-dominated set. `on_individual(generation, index, result)` hears of
    each policy as soon as it is trained and measured; `on_state` gets the `run_state` after every
    generation (after `on_generation`, which records it), and `resume`, such a state, continues
    that run with the next generation."""
    spec = config.algorithm
    low, high = spec.weight_bounds
    nsga = NSGA2(np.full(2, low), np.full(2, high), spec.population_size, np.random.default_rng(config.seed),
                 spec.crossover_eta, spec.crossover_probability, spec.mutation_eta)
    result, first = EMOGIResult(), 0
    if resume is not None:
        nsga.load_state_dict(resume["nsga"])
        result, first = result_of(resume), int(resume["generations"])
    owns_backend = backend is None
    backend = make_backend(config) if backend is None else backend
    start = time.monotonic() - result.wall_time
    try:
        for generation in range(first, spec.generations):
            genomes = nsga.ask()
            # NSGA-II names each offspring's parents at ask time; the first parent's policy is inherited.
            parents = np.asarray(nsga._pending_parents)
            jobs = []
            for index, genome in enumerate(genomes):
                inherited = result.policies.get(int(parents[index, 0])) if spec.inherit_weights else None
                frames = spec.initial_env_frames if inherited is None else spec.offspring_env_frames
                jobs.append(Job(genome, individual_seed(config.seed, generation, index), frames, inherited))
            hook = None if on_individual is None else functools.partial(on_individual, generation)
            outcomes = backend.run(jobs, hook)
            objective_rows = np.array([np.full(2, np.inf) if o is None else o.objectives for o in outcomes])
            nsga.tell(genomes, objective_rows)
            assert nsga.told_ids is not None and nsga.told_parent_ids is not None and nsga.ids is not None
            individuals = []
            for k, outcome in enumerate(outcomes):
                identifier = int(nsga.told_ids[k])
                if outcome is not None:
                    result.policies[identifier] = outcome.weights
                individuals.append(Individual(
                    generation, identifier, (int(nsga.told_parent_ids[k, 0]), int(nsga.told_parent_ids[k, 1])),
                    genomes[k], objective_rows[k], None if outcome is None else outcome.behaviour,
                    0 if outcome is None else outcome.env_frames, np.nan if outcome is None else outcome.wall_time,
                    -1 if outcome is None else outcome.worker))
            result.history += individuals
            assert nsga.objectives is not None
            finite = np.isfinite(nsga.objectives).all(axis=1)
            first = non_dominated_fronts(nsga.objectives[finite])[0] if finite.any() else np.zeros(0, dtype=int)
            result.population_ids = nsga.ids.copy()
            result.front_ids = np.sort(nsga.ids[finite][first])
            result.wall_time = time.monotonic() - start
            if on_generation is not None:
                on_generation(GenerationReport(generation, individuals, result.front_ids,
                                               sum(o is None for o in outcomes), result.wall_time))
            if on_state is not None:
                on_state(run_state(generation + 1, nsga, result))
    finally:
        if owns_backend:
            backend.close()
    return result
