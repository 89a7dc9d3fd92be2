"""The one way a process gets its sampling side, for single- and multi-agent runs alike: the actor
loop, the serial trainer and the benchmarks call `make_sampling_side` and drive what it returns
the same way, so neither side's module needs to know the other."""

from __future__ import annotations

from ...config import RunConfig
from .multiagent_sampling import MultiAgentSamplingSide, make_multiagent_side
from .sampling import SamplingSide, make_single_agent_side


def make_sampling_side(config: RunConfig, seed: int, *,
                       use_torch: bool = False) -> SamplingSide | MultiAgentSamplingSide:
    """A multi-agent run's actors get the side with a policy dimension, which acts with numpy only;
    a single-agent run's side samples torch-free unless the run needs torch or `use_torch` asks
    for it."""
    if config.multiagent is not None:
        return make_multiagent_side(config, seed)
    return make_single_agent_side(config, seed, use_torch=use_torch)
