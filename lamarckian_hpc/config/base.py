"""What every config section shares: strict, frozen validation, and the run file's storage section."""

from __future__ import annotations

import functools
import json
import types
import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ConfigError(ValueError):
    """A config that cannot be used; its message is one line meant for the user."""


def _containers(annotation: Any) -> frozenset[type]:
    """Which of tuple and Path an annotation accepts, through Optional, unions and Annotated."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, typing.Annotated):
        members = typing.get_args(annotation)[: 1 if origin is typing.Annotated else None]
        return frozenset().union(*(_containers(member) for member in members))
    if annotation is tuple or origin is tuple:
        return frozenset({tuple})
    if isinstance(annotation, type) and issubclass(annotation, Path):
        return frozenset({Path})
    return frozenset()


class Section(BaseModel):
    """Unknown fields are errors (a typo must not be silently ignored) and a loaded config is frozen.

    Validation is strict: a coercion would hide a mistake (`num_envs: true` read as 1, `seed: '3'`
    as 3, `batch_size: 2.5e3` as 2500), so a field takes only values of its own type, ints where
    floats are asked for excepted. Numbers must be finite: no field means anything by infinity
    or NaN, and strict JSON (the run file's config) cannot hold them. YAML and JSON have no
    tuples and no paths, so lists given for tuple fields and strings given for path fields are
    converted before validation (`_from_yaml`); their items are still validated strictly."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, strict=True, allow_inf_nan=False)

    @classmethod
    @functools.cache
    def _converted_fields(cls) -> dict[str, frozenset[type]]:
        return {name: kinds for name, field in cls.model_fields.items()
                if (kinds := _containers(field.annotation))}

    @model_validator(mode="before")
    @classmethod
    def _from_yaml(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        converted = dict(data)
        for name, kinds in cls._converted_fields().items():
            value = data.get(name)
            if tuple in kinds and isinstance(value, list):
                converted[name] = tuple(value)
            elif Path in kinds and isinstance(value, str):
                converted[name] = Path(value)
        return converted


class RootSection(Section):
    """A whole config file: what the run file stores as JSON."""

    def to_json_dict(self) -> dict[str, Any]:
        """The resolved config as plain JSON types."""
        return json.loads(self.model_dump_json())


class TrajectoriesConfig(Section):
    """Recorded episodes in the run file (`/trajectories`, see the run-file reference)."""

    every_episodes: int = Field(
        100, ge=0, description="`train` records one finished episode in every this many, per actor (its first, "
        "then every N-th), and so do each PBT member, each league learner and each EMOGI policy's evaluation "
        "(tagged with member, generation and opponent); 0 records none.")
    max_megabytes: float = Field(
        1024.0, gt=0, description="Stop recording (and say so; training goes on) once the recorded steps take this "
        "much of the run file.")
    compression: Literal["gzip", "lzf", "none"] = Field(
        "gzip", description="Filter of the observation and action datasets: gzip (level 1) shrinks image frames "
        "about 78x at the speed of lzf (48x); none writes fastest where nothing compresses.")


class WandbConfig(Section):
    """A Weights & Biases run per run file (`storage.wandb`; the wandb extra)."""

    project: str = Field("lamarckian-hpc", min_length=1, description="W&B project of the runs.")
    entity: str | None = Field(
        None, min_length=1, description="W&B team or user the project belongs to; null: the logged-in user's default.")
    mode: Literal["online", "offline"] = Field(
        "online", description="online sends the metrics as they come (after `wandb login`, or with WANDB_API_KEY); "
        "offline writes them to <directory>/wandb/offline-run-*/, for `wandb sync` later (nodes without internet).")
    directory: Path | None = Field(
        None, description="Folder of W&B's local files (its wandb/ folder); null: WANDB_DIR, or the working "
        "directory.")
    group: str | None = Field(None, min_length=1, description="W&B group of the run, e.g. the runs of one study.")


class MlflowConfig(Section):
    """An MLflow run per run file (`storage.mlflow`; the mlflow extra)."""

    tracking_uri: str | None = Field(
        None, min_length=1, description="MLflow tracking server or store: http://host:5000, sqlite:///mlflow.db, or "
        "file:///DIR (MLflow 3 asks for MLFLOW_ALLOW_FILE_STORE=true there); null: MLFLOW_TRACKING_URI, or MLflow's "
        "default.")
    experiment: str = Field("lamarckian-hpc", min_length=1, description="MLflow experiment of the runs; made if "
                            "missing.")


class StorageConfig(Section):
    directory: Path = Field(Path("runs"), description="Folder for run files.")
    run_name: str | None = Field(None, min_length=1, description="File stem; default <config>-<time>-s<seed>.")
    metrics_interval_seconds: float = Field(5.0, gt=0, description="How often metrics are flushed to disk.")
    min_free_megabytes: float = Field(
        64.0, ge=0, description="Stop with a clear error, files intact, when less than this is free on their disk.")
    checkpoint_interval_seconds: float | None = Field(
        60.0, gt=0, description="How often training state is saved for --resume; null saves only at the end.")
    keep_last_checkpoints: int = Field(
        1, ge=1, le=1000,
        description="Training runs: how many of the newest checkpoints to keep. The newest is always <run>.ckpt; "
                    "with more than 1, the newest k are also <run>.checkpoints/v<policy version>.ckpt (hard links "
                    "where the file system has them) and older ones are removed.")
    keep_best_checkpoint: bool = Field(
        True, description="Training runs: also keep the checkpoint whose mean return over the last "
                          "stop.return_window episodes was the highest when it was saved, as "
                          "<run>.checkpoints/best.ckpt (for evaluate and --resume --checkpoint best).")
    trajectories: TrajectoriesConfig = Field(default_factory=TrajectoriesConfig)
    tensorboard: Path | None = Field(
        None, description="Also write the run's metrics live as TensorBoard event files in DIR/<run name>/ "
        "(`tensorboard --logdir DIR`), with the run file's metric names, flushed with it; a population run adds "
        "one series per PBT member. Needs tensorboardX (the export extra); a sink that fails logs one line and the "
        "run goes on.")
    wandb: WandbConfig | None = Field(
        None, description="Also send the run's metrics live to Weights & Biases, one W&B run named after the run "
        "file, with the run file's metric names and steps and the resolved config (dotted keys) as its config; "
        "e.g. storage.wandb.mode=offline. Needs the wandb extra; a sink that fails logs one line and the run goes on.")
    mlflow: MlflowConfig | None = Field(
        None, description="Also send the run's metrics live to MLflow, one MLflow run named after the run file, with "
        "the run file's metric names and steps and the resolved config (dotted keys) as its parameters; e.g. "
        "storage.mlflow.tracking_uri=http://host:5000. Needs the mlflow extra; a sink that fails logs one line and "
        "the run goes on.")
