"""The `runtime:` section every population run shares (PBT+PPO, EMOGI, NSGA-II, the GA, ES, CMA-ES,
game balancing): where its workers run (`population.workflow.run_population`, one workflow for all)
and how long an answer may take. Algorithms that train networks add their torch settings."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from .base import Section


class PopulationRuntimeConfig(Section):
    mode: Literal["ray", "fork", "serial"] = Field(
        "ray", description="ray: workers are Ray actors, on every node of the cluster; fork: processes forked from "
                           "this one (one machine, no Ray start-up); serial: everything in this process.")
    num_workers: int | None = Field(None, ge=1, description="Worker processes; default one per core (and at most one "
                                                            "per member where members live in the workers).")
    ray_address: str | None = Field(None, description="Join this Ray cluster; default starts a local one.")
    timeout_seconds: float = Field(
        3600.0, gt=0, le=604_800,
        description="A request (an evaluation, a member's interval) unanswered this long fails and its worker is "
                    "replaced: an evaluation gets the worst objectives, a run whose members lived there ends naming "
                    "the worker.")
    join_folder: Path | None = Field(
        None, description="The run's join folder, where actor jobs find a running run and say when they leave (a "
                          "Slurm launch sets it beside the run file). With it and mode ray, the pool takes one "
                          "worker per CPU of every node that joins, and gives them up when it leaves, at the next "
                          "generation's start; members move with their states. null: the workers are fixed.")


class TrainingPopulationRuntimeConfig(PopulationRuntimeConfig):
    torch_threads: int = Field(1, ge=1, le=256, description="Torch threads of every process that trains.")


class CoLocatedTrainingRuntimeConfig(TrainingPopulationRuntimeConfig):
    """For populations that train several learners on one worker (PBT's members and the league's
    learners live there, EMOGI's policies of a generation are shared out): they may update in one
    batched step."""

    batched_updates: bool = Field(
        True, description="The learners of one worker sample in turn and update together, one batched PPO step "
                          "over their stacked parameters (the same learning per learner); false updates them one "
                          "by one.")
