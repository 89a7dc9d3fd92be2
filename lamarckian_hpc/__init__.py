"""lamarckian-hpc: distributed evolutionary reinforcement learning on Slurm clusters."""

from __future__ import annotations


def __getattr__(name: str) -> str:
    """`__version__`, read from the installed metadata only when asked for: importlib.metadata
    costs about 0.1 s, which every actor process and every learner would pay at start-up."""
    if name != "__version__":
        raise AttributeError(f"module 'lamarckian_hpc' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("lamarckian-hpc")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return "0.0.0+unknown"
