"""Where a learner runs, and how its batch gets there.

`choose_device` turns `runtime.device` into a torch device and a reason the learner logs: `auto`
takes the GPU where the GPU's update is the faster one (see `AUTO_RULE`), the CPU's threads where
they are.

`to_device` moves one experience array to the learner's device. On the CPU it is the array itself
(no copy). On a GPU a copy from pageable memory goes through the driver's own staging buffer at a
fraction of the bus's speed and waits for the stream (measured on an H200: 36 ms for image Pong's
8,192 frames, half the update's GPU time); instead the array is copied, in chunks, into page-locked
(pinned) host memory and from there to the device without waiting, so that the host's copy of
one chunk overlaps the bus transfer of the one before. Frames stay uint8 until they are on the
device (a quarter of float32's bytes); the model converts them there.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

#: Bytes per pinned staging copy: big enough that each transfer runs near the bus's speed, small
#: enough that the host copies the next chunk while the bus moves this one.
CHUNK_BYTES = 16 << 20

#: `runtime.device: auto` with a GPU present: which learners go to it. A CNN learner, and a PPO or
#: IMPALA learner of any network, whose minibatch step is a replayed CUDA graph there
#: (`rl.captured`): measured on one H200 against its 16 CPU threads (benchmarks/scale/gpu_learner_check.py,
#: docs/benchmarks/learning.md, two runs), image Pong's PPO 27-29x, CartPole's PPO 8.0x and IMPALA
#: 3.5-3.8x, Football's PPO 5.5-7.1x and IMPALA 5.2-5.5x. The learners that step eagerly with a host
#: check per step (DQN, SAC, A3C) with an MLP stay on the CPU's threads: eagerly, on the GPU, an
#: MLP's update waits on kernel launches (CartPole's PPO before the recorded step: 0.65-0.74x).
RECORDED_ALGORITHMS = ("ppo", "impala")


def choose_device(requested: str, model_kind: str = "mlp", algorithm: str = "ppo") -> tuple[torch.device, str]:
    """The learner's device for `runtime.device` = `requested` (auto, cpu, cuda), and why."""
    if requested == "cuda" and not torch.cuda.is_available():
        raise ValueError("runtime.device is 'cuda' but torch sees no GPU; use 'auto' or 'cpu'")
    if requested != "auto":
        return torch.device(requested), f"runtime.device is {requested}"
    if not torch.cuda.is_available():
        return torch.device("cpu"), "runtime.device is auto and torch sees no GPU"
    if model_kind == "cnn":
        return torch.device("cuda"), "runtime.device is auto: a CNN learner trains many times faster on the GPU"
    if algorithm in RECORDED_ALGORITHMS:
        return torch.device("cuda"), (f"runtime.device is auto: a {algorithm} learner replays its minibatch step as "
                                      "a CUDA graph on the GPU, faster than the CPU's threads even for an MLP")
    return torch.device("cpu"), (f"runtime.device is auto: an MLP {algorithm} learner launches every kernel "
                                 "eagerly, and the CPU's threads train it faster than the GPU")


def to_device(array: np.ndarray, device: torch.device, pinned: bool = True) -> Tensor:
    """`array` as a tensor on `device`, in its own dtype. On a GPU, through pinned memory without
    waiting (`pinned`; see the module's doc), or the plain pageable copy (pinned False)."""
    return _moved(array, device, pinned, None)[0]


def to_device_mapped(array: np.ndarray, device: torch.device, function: Callable[[Tensor], Tensor],
                     pinned: bool = True) -> tuple[Tensor, Tensor]:
    """`to_device(array, device)` and `function` of it, for a `function` of rows each on its own
    (the critic's values): on a GPU it is queued for each chunk as the chunk is, so the device
    computes one chunk while the host copies the next into pinned memory (image Pong: the critic's
    pass over the batch hides under the copy). Elsewhere `function` of the whole tensor."""
    return _moved(array, device, pinned, function)  # type: ignore[return-value]


def _moved(array: np.ndarray, device: torch.device, pinned: bool,
           function: Callable[[Tensor], Tensor] | None) -> tuple[Tensor, Tensor | None]:
    source = torch.from_numpy(array)
    if device.type != "cuda" or not pinned or source.dim() == 0 or source.nbytes <= CHUNK_BYTES:
        if device.type != "cuda" or not pinned:
            target = source.to(device)
        else:
            target = source.pin_memory().to(device, non_blocking=True)
        return target, None if function is None else function(target)
    source = source.contiguous()
    target = torch.empty(source.shape, dtype=source.dtype, device=device)
    rows = max(1, CHUNK_BYTES // max(1, source[0].nbytes))
    outputs = []
    for start in range(0, len(source), rows):
        # The caching host allocator keeps each pinned chunk until its transfer is done.
        chunk = target[start : start + rows]
        chunk.copy_(source[start : start + rows].pin_memory(), non_blocking=True)
        if function is not None:
            outputs.append(function(chunk))
    return target, None if function is None else torch.cat(outputs)
