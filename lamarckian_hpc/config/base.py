"""What every config section shares: strict, frozen validation, and the run file's storage section."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class ConfigError(ValueError):
    """A config that cannot be used; its message is one line meant for the user."""


class Section(BaseModel):
    """Unknown fields are errors (a typo must not be silently ignored) and a loaded config is frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


class RootSection(Section):
    """A whole config file: what the run file stores as JSON."""

    def to_json_dict(self) -> dict[str, Any]:
        """The resolved config as plain JSON types."""
        return json.loads(self.model_dump_json())


class StorageConfig(Section):
    directory: Path = Field(Path("runs"), description="Folder for run files.")
    run_name: str | None = Field(None, min_length=1, description="File stem; default <config>-<time>-s<seed>.")
    metrics_interval_seconds: float = Field(5.0, gt=0, description="How often metrics are flushed to disk.")
    min_free_megabytes: float = Field(
        64.0, ge=0, description="Stop with a clear error, files intact, when less than this is free on their disk.")
    checkpoint_interval_seconds: float | None = Field(
        60.0, gt=0, description="How often training state is saved for --resume; null saves only at the end.")
