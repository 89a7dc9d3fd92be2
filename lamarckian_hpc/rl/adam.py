"""Adam, step for step what `torch.optim.Adam(foreach=True)` does with its defaults (no weight
decay, no AMSGrad), written out so that building a learner does not import `torch._dynamo`.

Every `torch.optim.Optimizer` imports `torch._dynamo` when it is built and when it first steps;
that import takes about as long as importing torch itself (2 to 7 s here), and a process that
only trains a small network on the CPU pays it before its first update: every PBT member process,
every learner of a short run. The update below is the same sequence of tensor operations as
torch's, so the parameters it produces are bitwise equal (tests/test_rl.py checks it), and its
`state_dict` has torch's layout, so checkpoints move between the two either way.

On a GPU the same step runs as torch's fused kernel (`torch.optim.Adam(fused=True)`'s, one
launch for all parameters instead of a dozen), with the step counts and the learning rate in
device tensors: nothing is read back to the host, so the step can be recorded in a CUDA graph, and
`step(found_inf=...)` skips it on the device (parameters, moments and step counts as if it had
not been taken) when a flag computed there says so. The CPU keeps the multi-tensor update above.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor


def capturing(device: torch.device) -> bool:
    """Whether work on `device` is being recorded into a CUDA graph right now (never on a CPU)."""
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


class Adam:
    """Adam (Kingma and Ba 2015) over one group of parameters, with torch's optimizer interface:
    `param_groups[0]["lr"]`, `zero_grad`, `step`, `state`, `state_dict` and `load_state_dict`."""

    def __init__(self, params: Iterable[Tensor], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, fused: bool | None = None) -> None:
        """`fused`: torch's fused kernel with device-side step counts (see the module's doc); None
        takes it when the parameters are on a GPU."""
        parameters = list(params)
        if not parameters:
            raise ValueError("Adam got an empty parameter list")
        if lr < 0 or eps < 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"Adam: invalid lr {lr}, betas {betas} or eps {eps}")
        self.param_groups: list[dict[str, Any]] = [{
            "params": parameters, "lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": 0,
            "amsgrad": False, "maximize": False, "foreach": None, "capturable": False, "differentiable": False,
            "fused": None, "decoupled_weight_decay": False,
        }]
        self.state: dict[Tensor, dict[str, Tensor]] = {}
        self.fused = parameters[0].device.type == "cuda" if fused is None else bool(fused)
        #: The learning rate the fused kernel reads, on the parameters' device; refreshed from
        #: `param_groups[0]["lr"]` by `sync_learning_rate` (outside any graph capture).
        self._lr_tensor: Tensor | None = None
        self._lr_value: float | None = None

    @property
    def _params(self) -> list[Tensor]:
        return self.param_groups[0]["params"]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for param in self._params:
            if param.grad is None:
                continue
            if set_to_none:
                param.grad = None
            else:
                param.grad.detach_().zero_()

    def sync_learning_rate(self) -> Tensor:
        """The fused kernel's learning-rate tensor, set to `param_groups[0]["lr"]` when that changed
        (one small device write, no read back). A recorded step reads the tensor at replay."""
        lr = float(self.param_groups[0]["lr"])
        if self._lr_tensor is None:
            # float64 on the CPU: the kernel then computes as with a float learning rate, bitwise
            # torch.optim.Adam(fused=True)'s; CUDA's kernel reads a float32 one.
            device = self._params[0].device
            dtype = torch.float64 if device.type == "cpu" else torch.float32
            self._lr_tensor = torch.tensor(lr, dtype=dtype, device=device)
            self._lr_value = lr
        elif lr != self._lr_value:
            self._lr_tensor.fill_(lr)
            self._lr_value = lr
        return self._lr_tensor

    @torch.no_grad()
    def step(self, found_inf: Tensor | None = None) -> None:
        """One Adam step for every parameter that has a gradient (the others keep their moments):
        torch's multi-tensor ("foreach") update, a handful of calls for all parameters at once, or
        its fused kernel (`fused`). `found_inf`, fused only: a device scalar; 1 skips the step
        without the host reading it."""
        if self.fused:
            self._fused_step(found_inf)
            return
        if found_inf is not None:
            raise ValueError("Adam.step(found_inf=...) needs the fused update (Adam(..., fused=True))")
        group = self.param_groups[0]
        lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
        params = [param for param in self._params if param.grad is not None]
        if not params:
            return
        for param in params:
            if param not in self.state:
                self.state[param] = {"step": torch.tensor(0.0), "exp_avg": torch.zeros_like(param),
                                     "exp_avg_sq": torch.zeros_like(param)}
        states = [self.state[param] for param in params]
        grads = [param.grad for param in params]
        steps = [state["step"] for state in states]
        exp_avgs = [state["exp_avg"] for state in states]
        exp_avg_sqs = [state["exp_avg_sq"] for state in states]
        torch._foreach_add_(steps, 1.0)
        torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2)
        counts = [step.item() for step in steps]
        step_sizes = [(lr / (1 - beta1**count)) * -1 for count in counts]
        bias_correction2_sqrt = [(1 - beta2**count) ** 0.5 for count in counts]
        denominators = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_div_(denominators, bias_correction2_sqrt)
        torch._foreach_add_(denominators, eps)
        torch._foreach_addcdiv_(params, exp_avgs, denominators, step_sizes)

    def _fused_step(self, found_inf: Tensor | None) -> None:
        """torch.optim.Adam(fused=True)'s step: counts up on the device, one fused launch, and the
        counts taken back down where `found_inf` says the step was skipped."""
        group = self.param_groups[0]
        (beta1, beta2), eps = group["betas"], group["eps"]
        params = [param for param in self._params if param.grad is not None]
        if not params:
            return
        for param in params:
            state = self.state.get(param)
            if state is None:
                self.state[param] = {"step": torch.zeros((), dtype=torch.float32, device=param.device),
                                     "exp_avg": torch.zeros_like(param), "exp_avg_sq": torch.zeros_like(param)}
            elif state["step"].device != param.device:  # a state loaded or written on the CPU
                state["step"] = state["step"].to(param.device, torch.float32)
        if self._lr_tensor is None or not capturing(params[0].device):
            self.sync_learning_rate()
        states = [self.state[param] for param in params]
        steps = [state["step"] for state in states]
        torch._foreach_add_(steps, 1.0)
        torch._fused_adam_(params, [param.grad for param in params], [state["exp_avg"] for state in states],
                           [state["exp_avg_sq"] for state in states], [], steps, lr=self._lr_tensor, beta1=beta1,
                           beta2=beta2, weight_decay=0.0, eps=eps, amsgrad=False, maximize=False, grad_scale=None,
                           found_inf=found_inf)
        if found_inf is not None:
            torch._foreach_sub_(steps, [found_inf] * len(steps))

    def state_dict(self) -> dict[str, Any]:
        """torch's layout: per-parameter state keyed by the parameter's index, groups without tensors."""
        index = {param: i for i, param in enumerate(self._params)}
        groups = [{**{k: v for k, v in group.items() if k != "params"}, "params": list(range(len(self._params)))}
                  for group in self.param_groups]
        return {"state": {index[param]: dict(state) for param, state in self.state.items()}, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Take a state from `state_dict()` here or from a `torch.optim.Adam` over the same parameters."""
        groups = state_dict["param_groups"]
        if len(groups) != 1 or len(groups[0]["params"]) != len(self._params):
            raise ValueError(f"optimizer state has {[len(g['params']) for g in groups]} parameters in its groups; "
                             f"this Adam has one group of {len(self._params)}")
        for key in ("lr", "betas", "eps"):
            if key in groups[0]:
                self.param_groups[0][key] = tuple(groups[0][key]) if key == "betas" else groups[0][key]
        position = {saved: i for i, saved in enumerate(groups[0]["params"])}
        self.state = {}
        for saved, slots in state_dict["state"].items():
            param = self._params[position[saved]]
            self.state[param] = {
                "step": (torch.tensor(float(slots["step"]), device=param.device) if self.fused
                         else torch.tensor(float(slots["step"]))),
                "exp_avg": torch.as_tensor(slots["exp_avg"]).to(param.device, param.dtype).clone(),
                "exp_avg_sq": torch.as_tensor(slots["exp_avg_sq"]).to(param.device, param.dtype).clone(),
            }
