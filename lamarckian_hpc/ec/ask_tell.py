"""The one interface every generational population algorithm gives (NSGA-II, the GA, the OpenAI
ES, CMA-ES, the game testing search), so that one population workflow in `runtime/` can drive
any of them, record one population history and save one checkpoint, without knowing which
algorithm it runs. The algorithms never evaluate anything; the workflow asks, evaluates where it
likes (here, on workers, on other hosts) and tells.

A round is: `genomes = algorithm.ask()`, evaluate every row, `algorithm.tell(genomes, results)`.
After each tell the algorithm says who the told individuals were (`told_ids`,
`told_parent_ids`, `told_objectives`), which is what the history records, and what its current
population is (`population`, and the `PopulationView` shortcuts `genomes`, `objectives`, `ids`).
Between a tell and the next ask, `state_dict()` captures everything the algorithm needs to
continue, as plain data only (numpy arrays, numbers, strings, lists, dicts), because the
checkpoint is written with msgpack and raw array frames and is never pickled: a checkpoint must
not be able to run code when it is read, and must survive a change of the classes that wrote it.
`load_state_dict(state)` on an algorithm built with the same configuration then continues
exactly as the saved one would have (the same next genomes, the same ids).

Random generator states are `numpy.random.Generator.bit_generator.state` dicts; PCG64's holds
two 128-bit integers, which a msgpack writer must carry as strings (as `population.pipe_messages` does).
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np

from .population import IdCounter, Population

Told = TypeVar("Told", contravariant=True)


@runtime_checkable
class AskTell(Protocol[Told]):
    """A generational ask/tell algorithm. `Told` is what its evaluations return and `tell` takes:
    objectives [n, m] (minimised, float) for the numeric algorithms, `games.testing.EpisodeOutcome`s
    (or their plain dicts) for the game testing search, whose objectives depend on every episode so far
    and so are computed by the algorithm, not by the evaluation."""

    counter: IdCounter  # numbers newborns; counter.next_id is how many individuals were ever told
    population: Population | None  # the current population (ES and CMA-ES: the last told generation)
    told_ids: np.ndarray | None  # [n] ids given to the individuals of the last tell
    told_parent_ids: np.ndarray | None  # [n, 2]; -1 where there is no parent (ES and CMA-ES: always)
    told_objectives: np.ndarray | None  # [n, m] the objectives the last told individuals were scored with

    @property
    def asked_parent_ids(self) -> np.ndarray | None:
        """[n, 2] parents of the genomes of the last ask, known before they are evaluated (a
        Lamarckian workflow starts each offspring from its first parent's trained weights)."""
        ...

    def ask(self) -> np.ndarray:
        """Genomes [n, d] to evaluate next."""
        ...

    def tell(self, genomes: np.ndarray, results: Told) -> None:
        """The evaluations of the genomes of the last ask, in the same order."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue, as plain data; taken between a tell and the next ask."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue as the algorithm whose `state_dict()` this is."""
        ...


def population_state(population: Population | None) -> dict[str, np.ndarray] | None:
    """A population as plain arrays (None stays None)."""
    if population is None:
        return None
    return {"genomes": population.genomes, "objectives": population.objectives, "ids": population.ids,
            "parent_ids": population.parent_ids}


def population_from_state(state: dict[str, Any] | None) -> Population | None:
    """The inverse of `population_state`, with the dtypes a Population holds."""
    if state is None:
        return None
    return Population(np.asarray(state["genomes"], float).copy(), np.asarray(state["objectives"], float).copy(),
                      np.asarray(state["ids"], np.int64).copy(), np.asarray(state["parent_ids"], np.int64).copy())
