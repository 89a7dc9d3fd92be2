"""Automated game testing in the spirit of Wuji (Zheng et al. 2019): an EvoRL search whose policies
are rewarded both for winning and for reaching states not seen before, with NSGA-II over the two,
so that the population keeps pushing into unexplored corners of the game, where bugs hide.

A policy here is an action sequence (one action of `battle.ACTION_NAMES` per decision of the
controlled hero; the built-in AI takes over after the last), played in the testing scenario of the
rules file with one fixed episode seed, so an episode is a pure function of the genome. Novelty is
count based: a state signature (the discretised observation, `Battle.signature`) seen n times in
all episodes so far is worth 1/n, and an episode's novelty is the sum over the signatures it
visited, recomputed for parents and offspring every generation as the counts grow.

Every bug symptom a battle reports (crash, negative damage, health above maximum, stuck battle) is
recorded the first time it appears, with the seed and the actions that led to it; `replay` plays
them again. `random_play` spends the same episode budget on uniformly random actions, the
baseline the search is compared with. The search's whole state can be saved after any generation and
the search resumed from it (`on_state`, `resume`), for `evolve --resume`."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np

from ..ec.operators import crowded_tournament, uniform_crossover
from ..ec.ranking import rank_and_crowding
from .battle import NUM_ACTIONS, Battle, BattleResult
from .data import GameData
from .teams import compile_spec


@dataclass(frozen=True)
class BugReport:
    """A symptom, and how to reproduce it: play `actions` from `seed` (see `replay`)."""

    symptom: str
    detail: str
    seed: int
    actions: tuple[int, ...]
    episode: int  # how many episodes the search had played when it found it (1-based)

    def to_json_dict(self) -> dict:
        return {**asdict(self), "actions": list(self.actions)}


@dataclass
class SearchResult:
    bugs: dict[str, BugReport] = field(default_factory=dict)  # by symptom, the first report of each
    episodes: int = 0
    distinct_states: int = 0
    best_win: float = -1.0
    history: list[dict] = field(default_factory=list)  # per generation: genomes, objectives, ids, parents


def play(data: GameData, seed: int, actions: Callable[[tuple[float, ...], int], int | None] | np.ndarray
         ) -> BattleResult:
    """One testing episode: the scenario's team, driven by `actions` (a controller, or a sequence
    indexed by decision), against the scenario's opponent run by the AI."""
    scenario = data.testing
    if not callable(actions):
        sequence = [int(action) for action in np.asarray(actions).ravel()]

        def controller(observation: tuple[float, ...], decision: int) -> int | None:
            return sequence[decision] if decision < len(sequence) else None
    else:
        controller = actions
    rules = data.rules.model_copy(update={"time_limit": scenario.time_limit})
    battle = Battle(compile_spec(data, scenario.team), compile_spec(data, scenario.opponent), rules, data.bugs,
                    seed, controller, scenario.max_decisions)
    return battle.run()


def replay(data: GameData, report: BugReport) -> BattleResult:
    """Plays a recorded bug again; its result's `symptom` is the report's when the bug reproduces."""
    return play(data, report.seed, np.asarray(report.actions, dtype=np.int64))


def win_score(result: BattleResult) -> float:
    """The controlled side's remaining strength minus the opponent's, -1..1 (a win counts 1 extra)."""
    own, other = result.remaining_strength
    return own - other + (1.0 if result.winner == 0 else 0.0)


def novelty_keys(signatures: set[tuple[int, ...]]) -> set[tuple[int, ...]]:
    """What novelty counts: every whole state signature, and every single feature's value on its
    own (feature i at value v as the key (-1 - i, v)), so that a rare value of one feature (a war
    cry stack never reached before) is rewarded even when the rest of the state is common."""
    keys = set(signatures)
    for signature in signatures:
        keys.update((-1 - index, value) for index, value in enumerate(signature))
    return keys


class StateArchive:
    """How often each novelty key was seen, over every episode so far."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[int, ...]] = Counter()
        self.states = 0  # distinct whole signatures

    def add(self, signatures: set[tuple[int, ...]]) -> None:
        self.states += sum(1 for signature in signatures if signature not in self.counts)
        self.counts.update(novelty_keys(signatures))

    def novelty(self, signatures: set[tuple[int, ...]]) -> float:
        return float(sum(1.0 / self.counts[key] for key in novelty_keys(signatures) if self.counts[key]))


class _Recorder:
    """Plays episodes, archives their states and keeps the first report of each symptom."""

    def __init__(self, data: GameData, seed: int, result: SearchResult) -> None:
        self.data, self.seed, self.result = data, seed, result
        self.archive = StateArchive()

    def play(self, genome: np.ndarray) -> BattleResult:
        episode = play(self.data, self.seed, genome)
        self.result.episodes += 1
        self.archive.add(episode.signatures)
        self.result.distinct_states = self.archive.states
        self.result.best_win = max(self.result.best_win, win_score(episode))
        if episode.symptom is not None and episode.symptom not in self.result.bugs:
            self.result.bugs[episode.symptom] = BugReport(episode.symptom, episode.detail, self.seed,
                                                          tuple(episode.actions), self.result.episodes)
        return episode


def _mutate(genomes: np.ndarray, rng: np.random.Generator, rate: float) -> np.ndarray:
    """Each action is redrawn with probability `rate`; every genome changes at least one action."""
    mutated = genomes.copy()
    n, length = mutated.shape
    redraw = rng.random((n, length)) < rate
    redraw[np.arange(n), rng.integers(0, length, size=n)] = True
    mutated[redraw] = rng.integers(0, NUM_ACTIONS, size=int(redraw.sum()))
    return mutated


def _search_state(generation: int, rng: np.random.Generator, population: dict[str, np.ndarray], next_id: int,
                  result: SearchResult, archive: StateArchive) -> dict:
    """What a resumed search needs after `generation` was selected, as arrays, lists and numbers."""
    return {"generation": generation, "rng": rng.bit_generator.state, "population": dict(population),
            "next_id": next_id, "episodes": result.episodes, "distinct_states": result.distinct_states,
            "best_win": result.best_win, "bugs": [report.to_json_dict() for report in result.bugs.values()],
            "history": [dict(entry) for entry in result.history], "archive_keys": list(archive.counts),
            "archive_counts": list(archive.counts.values()), "archive_states": archive.states}


def _restore(state: dict, rng: np.random.Generator, result: SearchResult, archive: StateArchive) -> None:
    rng.bit_generator.state = state["rng"]
    result.episodes, result.distinct_states = int(state["episodes"]), int(state["distinct_states"])
    result.best_win = float(state["best_win"])
    result.bugs = {report["symptom"]: BugReport(**{**report, "actions": tuple(report["actions"])})
                   for report in state["bugs"]}
    result.history = [dict(entry) for entry in state["history"]]
    archive.counts = Counter(dict(zip((tuple(key) for key in state["archive_keys"]), state["archive_counts"])))
    archive.states = int(state["archive_states"])


def search(data: GameData, episodes: int, population_size: int = 20, seed: int = 0,
           crossover_probability: float = 0.9, mutation_rate: float | None = None,
           on_generation: Callable[[int, SearchResult], None] | None = None,
           on_state: Callable[[dict], None] | None = None, resume: dict | None = None) -> SearchResult:
    """NSGA-II over (win score, novelty), both maximised, until `episodes` episodes were played.

    `on_state` gets the search's state after every generation's selection (after `on_generation`);
    `resume`, such a state, continues that search with the next generation's offspring. The
    survivors' episodes are played again rather than saved: an episode is a pure function of its
    genome, and replaying does not count towards the budget or the state archive."""
    rng = np.random.default_rng(seed)
    length = data.testing.max_decisions
    rate = 2.0 / length if mutation_rate is None else mutation_rate
    result = SearchResult()
    recorder = _Recorder(data, seed, result)
    if resume is None:
        genomes = rng.integers(0, NUM_ACTIONS, size=(min(population_size, episodes), length))
        ids = np.arange(len(genomes))
        parents = np.full((len(genomes), 2), -1)
        played = [recorder.play(genome) for genome in genomes]
        next_id, generation = len(genomes), 0
    else:
        _restore(resume, rng, result, recorder.archive)
        saved = resume["population"]
        genomes, ids, parents = saved["genomes"], saved["ids"], saved["parent_ids"]
        rank, crowding = saved["rank"], saved["crowding"]
        played = [play(data, seed, genome) for genome in genomes]
        next_id, generation = int(resume["next_id"]), int(resume["generation"])
    selected = resume is not None  # a resumed population was selected before it was saved
    while True:
        if not selected:
            wins = np.array([win_score(episode) for episode in played])
            novelty = np.array([recorder.archive.novelty(episode.signatures) for episode in played])
            objectives = -np.column_stack([wins, novelty])
            rank, crowding = rank_and_crowding(objectives)
            keep = np.lexsort((-crowding, rank))[:population_size]
            genomes, objectives, ids, parents = genomes[keep], objectives[keep], ids[keep], parents[keep]
            played, rank, crowding = [played[i] for i in keep], rank[keep], crowding[keep]
            result.history.append({"generation": generation, "genomes": genomes, "objectives": objectives,
                                   "ids": ids, "parent_ids": parents})
            if on_generation is not None:
                on_generation(generation, result)
            if on_state is not None:
                on_state(_search_state(generation, rng, {"genomes": genomes, "ids": ids, "parent_ids": parents,
                                                         "rank": rank, "crowding": crowding},
                                       next_id, result, recorder.archive))
        selected = False
        budget = episodes - result.episodes
        if budget <= 0:
            return result
        count = min(population_size, budget)
        mothers = crowded_tournament(rank, crowding, count, rng)
        fathers = crowded_tournament(rank, crowding, count, rng)
        children, _ = uniform_crossover(genomes[mothers], genomes[fathers], rng, crossover_probability)
        children = _mutate(children.astype(np.int64), rng, rate)
        offspring = [recorder.play(child) for child in children]
        genomes = np.concatenate([genomes, children])
        ids = np.concatenate([ids, np.arange(next_id, next_id + count)])
        parents = np.concatenate([parents, np.column_stack([ids[mothers], ids[fathers]])])
        next_id += count
        played += offspring
        generation += 1


def random_play(data: GameData, episodes: int, seed: int = 0) -> SearchResult:
    """The baseline: `episodes` episodes of uniformly random actions from the same episode seed."""
    rng = np.random.default_rng(seed + 1)
    result = SearchResult()
    recorder = _Recorder(data, seed, result)
    for _ in range(episodes):
        recorder.play(rng.integers(0, NUM_ACTIONS, size=data.testing.max_decisions))
    return result
