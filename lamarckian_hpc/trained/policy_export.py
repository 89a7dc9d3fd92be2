"""A trained policy for use outside lamarckian-hpc: its deterministic policy (`models/greedy.py`)
as an ONNX graph or a TorchScript module, and the check that the file computes what torch does.

The graph, for ONNX and TorchScript alike:

- input `observations`: [batch, *observation shape], float32 (uint8 for image and RAM
  observations, as the environment gives them); the batch size is free.
- outputs, in order: `actions` ([batch] int64 for discrete actions, [batch, action size] float32
  for continuous ones), then the network's outputs the algorithm names: `logits` (discrete
  actor-critic), `mean` (continuous actor-critic; SAC's mean before tanh), `q_values` (DQN), and
  an actor-critic's `values` ([batch] float32).

ONNX files are written with torch's `torch.export`-based exporter (`dynamo=True`, which needs
onnxscript; the TorchScript-based one is deprecated since torch 2.9) and carry the run's name,
algorithm, environment and policy version in their metadata. TorchScript files are traced
(`torch.jit.trace`) and load with `torch.jit.load` without lamarckian-hpc. Both need the `export`
extra only for ONNX (onnx, onnxscript, onnxruntime), imported when asked for.
"""

from __future__ import annotations

import contextlib
import copy
import io
import logging
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from ..models.cnn import ConvEncoder
from ..models.layers import Tanh
from ..runtime.algorithms import rl_algorithm
from ..storage import open_run
from .policy import TrainedPolicy

INPUT_NAME = "observations"
ONNX_INSTALL_HINT = "pip install -c constraints.txt -e '.[export]'"
#: Recorded observations the check runs on at most (the first ones of the run's recorded episodes),
#: and at most this many bytes of them (a few hundred image frames).
CHECK_ROWS = 20_000
CHECK_BYTES = 32 << 20
#: Observations drawn from the space to check on when the run records none.
SAMPLED_ROWS = 1_000


class ExportError(ValueError):
    """The export cannot be done as asked (a missing package, nothing to check on); one line."""


def greedy_module(trained: TrainedPolicy) -> nn.Module:
    """The run's deterministic policy, in eval mode, on a copy of the network without branches on
    the batch's size, which an exported graph must not have (its batch size is free): torch's own
    tanh for `models.layers.Tanh`, and a CNN's frames in one pass rather than in CPU-sized chunks,
    in float32 whatever `model.cnn_precision` (ONNX Runtime's CPU convolutions take no bfloat16)."""
    model = copy.deepcopy(trained.model)
    for module in list(model.modules()):
        if isinstance(module, ConvEncoder):
            module.cpu_chunk_rows = None
            module.compute_dtype = None
        for name, child in module.named_children():
            if isinstance(child, Tanh):
                setattr(module, name, nn.Tanh())
    return rl_algorithm(trained.config).build("greedy", model).eval()


def observation_dtype(observation_space: gym.Space) -> np.dtype:
    """What the graph takes: uint8 where the environment gives bytes (images, RAM), else float32
    (the dtype the run file records observations in)."""
    return np.dtype(np.uint8) if np.dtype(observation_space.dtype) == np.uint8 else np.dtype(np.float32)


def example_observations(observation_space: gym.Space, rows: int = 2) -> torch.Tensor:
    """`rows` observations drawn from the space, to trace the graph with."""
    space = copy.deepcopy(observation_space)
    space.seed(0)
    samples = np.stack([space.sample() for _ in range(rows)]).astype(observation_dtype(observation_space))
    return torch.from_numpy(samples)


def output_names(module: nn.Module) -> tuple[str, ...]:
    return tuple(module.output_names)


def export_torchscript(trained: TrainedPolicy, path: str | Path) -> Path:
    """Write the greedy policy as a traced TorchScript module (`torch.jit.load(path)`)."""
    path = Path(path)
    module = greedy_module(trained)
    with torch.no_grad(), _without_torchscript_deprecation():
        traced = torch.jit.trace(module, example_observations(trained.observation_space), check_trace=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    traced.save(str(path))
    return path


@contextlib.contextmanager
def _without_torchscript_deprecation() -> Iterator[None]:
    """torch 2.13 marks TorchScript deprecated in favour of torch.export, but TorchScript is what
    libtorch (C++) and older torch versions load; the documentation says so, the command need not."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.\w+` is deprecated", category=DeprecationWarning)
        yield


@contextlib.contextmanager
def _quiet_logger(name: str) -> Iterator[None]:
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def export_onnx(trained: TrainedPolicy, path: str | Path, run_name: str = "") -> Path:
    """Write the greedy policy as an ONNX graph with a free batch size (names and shapes: the
    module docstring). Raises ExportError without onnx and onnxscript."""
    try:
        import onnx
        import onnxscript  # noqa: F401 - what torch's exporter translates with
    except ImportError as error:
        raise ExportError(f"error: --onnx needs the export extra ({error.name} is missing): "
                          f"{ONNX_INSTALL_HINT}") from None
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    module = greedy_module(trained)
    names = output_names(module)
    batch = torch.export.Dim("batch")
    # The exporter reports its passes on stdout, and logs that torchvision's operators are not registered.
    with contextlib.redirect_stdout(io.StringIO()), _quiet_logger("torch.onnx"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(module, (example_observations(trained.observation_space),), str(path), dynamo=True,
                              input_names=[INPUT_NAME], output_names=list(names), dynamic_shapes=({0: batch},),
                              external_data=False, verbose=False)
        except torch.onnx.OnnxExporterError as error:
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise ExportError(f"error: torch cannot export the policy of {run_name or 'the run'} to ONNX: "
                              f"{reason}; --torchscript may") from None
    graph = onnx.load(str(path))
    batch_dimension = graph.graph.input[0].type.tensor_type.shape.dim[0]
    if not batch_dimension.dim_param:  # torch.export fixed the batch size: a branch on it in the network
        path.unlink()
        raise ExportError(f"error: the network of {run_name or 'the run'} fixes the batch size when exported "
                          f"to ONNX (a branch on it); --torchscript exports it")
    config = trained.config
    onnx.helper.set_model_props(graph, {
        "run": run_name, "algorithm": config.algorithm.name, "env_id": config.env.id,
        "policy_version": str(trained.policy_version), "observation_space": str(trained.observation_space),
        "action_space": str(trained.action_space), "outputs": ", ".join(names),
    })
    onnx.save(graph, str(path))
    return path


def recorded_observations(run_path: str | Path, observation_space: gym.Space) -> np.ndarray:
    """The first observations of the run's recorded episodes (CHECK_ROWS, CHECK_BYTES; none when it
    records none)."""
    row_bytes = max(1, int(np.prod(observation_space.shape)) * observation_dtype(observation_space).itemsize)
    rows = max(1, min(CHECK_ROWS, CHECK_BYTES // row_bytes))
    with open_run(run_path) as reader:
        policies = reader.trajectory_policies()
        if not policies:
            return np.zeros((0,))
        index = reader.episodes(policies[0])
        keep = np.cumsum(index["length"]) - index["length"] < rows
        if not keep.any():
            return np.zeros((0,))
        observations = reader.step_columns(("observations",), policies[0],
                                           {key: column[keep] for key, column in index.items()})["observations"]
    return observations[:rows]


def check_observations(run_path: str | Path, observation_space: gym.Space,
                       sampled_rows: int = SAMPLED_ROWS) -> tuple[np.ndarray, str]:
    """What to check an export on, and a few words saying what it is: the run's recorded
    observations, or observations drawn from its space when it recorded none."""
    try:
        observations = recorded_observations(run_path, observation_space)
    except (OSError, KeyError, ValueError) as error:
        raise ExportError(f"error: {run_path}: its recorded episodes cannot be read: {error}") from None
    if len(observations):
        return observations, "recorded observations"
    return example_observations(observation_space, sampled_rows).numpy(), \
        "observations drawn from the observation space: the run records no episodes"


@dataclass(frozen=True)
class ExportCheck:
    """How an exported file's outputs compare with torch's on the same observations."""

    file: Path
    rows: int
    output: str  # the output compared besides the actions (logits, mean, q_values)
    max_abs_difference: float
    identical_actions: float  # share of rows whose action equals torch's (exactly, for discrete)

    def summary(self) -> str:
        return (f"{self.file}: on {self.rows:,} observations, max |{self.output} difference| "
                f"{self.max_abs_difference:.3g}, identical actions {100 * self.identical_actions:.2f}%")


def _compare(file: Path, names: tuple[str, ...], torch_outputs: list[np.ndarray],
             file_outputs: list[np.ndarray]) -> ExportCheck:
    actions, outputs = torch_outputs[0], torch_outputs[1]
    exported_actions, exported_outputs = file_outputs[0], file_outputs[1]
    same = exported_actions == actions if np.issubdtype(actions.dtype, np.integer) else \
        np.isclose(exported_actions, actions, rtol=0.0, atol=1e-5)
    same_rows = same.reshape(len(actions), -1).all(axis=1)
    difference = float(np.max(np.abs(exported_outputs - outputs))) if outputs.size else 0.0
    return ExportCheck(file, len(actions), names[1], difference, float(same_rows.mean()) if len(actions) else 1.0)


def check_exports(trained: TrainedPolicy, observations: np.ndarray, onnx_path: Path | None = None,
                  torchscript_path: Path | None = None) -> list[ExportCheck]:
    """Run the exported files (ONNX with onnxruntime on the CPU, TorchScript with torch.jit.load)
    and torch's module on `observations`; one ExportCheck per file."""
    module = greedy_module(trained)
    names = output_names(module)
    inputs = np.ascontiguousarray(observations.astype(observation_dtype(trained.observation_space), copy=False))
    with torch.no_grad():
        expected = [tensor.numpy() for tensor in module(torch.from_numpy(inputs))]
    checks = []
    if onnx_path is not None:
        try:
            import onnxruntime
        except ImportError:
            raise ExportError(f"error: checking an ONNX export needs onnxruntime (the export extra): "
                              f"{ONNX_INSTALL_HINT}") from None
        session = onnxruntime.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
        checks.append(_compare(onnx_path, names, expected, session.run(list(names), {INPUT_NAME: inputs})))
    if torchscript_path is not None:
        with _without_torchscript_deprecation():
            loaded = torch.jit.load(str(torchscript_path))
        with torch.no_grad():
            outputs = [tensor.numpy() for tensor in loaded(torch.from_numpy(inputs))]
        checks.append(_compare(torchscript_path, names, expected, outputs))
    return checks
