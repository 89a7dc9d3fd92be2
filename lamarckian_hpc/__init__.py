"""lamarckian-hpc: distributed evolutionary reinforcement learning on Slurm clusters."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("lamarckian-hpc")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"
