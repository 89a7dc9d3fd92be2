"""lamarckian-hpc: distributed evolutionary reinforcement learning on Slurm clusters.

`lamarckian_hpc.run(config, overrides, output)` runs any config to a run file and returns a
`RunResult` (see `lamarckian_hpc.library`), and `lamarckian_hpc.evaluate(run)` plays a training run's
policy; the `lamarckian-hpc` command is a thin layer over them.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Names given on first use: importing the package stays free for every actor process and learner.
_LAZY = {"run": "library", "prepare": "library", "execute": "library", "evaluate": "library",
         "RunResult": "run_result", "RunFailed": "run_result"}

__all__ = ["run", "prepare", "execute", "evaluate", "RunResult", "RunFailed"]


def __getattr__(name: str) -> Any:
    """`__version__`, read from the installed metadata only when asked for: importlib.metadata
    costs about 0.1 s, which every actor process and every learner would pay at start-up. The
    library API (`run`, `RunResult`, ...) is imported on first use for the same reason."""
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    if name != "__version__":
        raise AttributeError(f"module 'lamarckian_hpc' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("lamarckian-hpc")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return "0.0.0+unknown"
