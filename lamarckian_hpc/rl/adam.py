"""Adam, step for step what `torch.optim.Adam` does with its defaults (no weight decay, no AMSGrad,
single-tensor path), written out so that building a learner does not import `torch._dynamo`.

Every `torch.optim.Optimizer` imports `torch._dynamo` when it is built and when it first steps;
that import takes about as long as importing torch itself (2 to 7 s here), and a process that
only trains a small network on the CPU pays it before its first update: every PBT member process,
every learner of a short run. The update below is the same sequence of tensor operations as
torch's, so the parameters it produces are bitwise equal (tests/test_rl.py checks it), and its
`state_dict` has torch's layout, so checkpoints move between the two either way.
"""

from __future__ import annotations

from typing import Any, Iterable

import torch
from torch import Tensor


class Adam:
    """Adam (Kingma and Ba 2015) over one group of parameters, with torch's optimizer interface:
    `param_groups[0]["lr"]`, `zero_grad`, `step`, `state`, `state_dict` and `load_state_dict`."""

    def __init__(self, params: Iterable[Tensor], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:
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

    @torch.no_grad()
    def step(self) -> None:
        """One Adam step for every parameter that has a gradient (the others keep their moments)."""
        group = self.param_groups[0]
        lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
        for param in self._params:
            grad = param.grad
            if grad is None:
                continue
            state = self.state.get(param)
            if state is None:
                state = self.state[param] = {"step": torch.tensor(0.0), "exp_avg": torch.zeros_like(param),
                                             "exp_avg_sq": torch.zeros_like(param)}
            step_t, exp_avg, exp_avg_sq = state["step"], state["exp_avg"], state["exp_avg_sq"]
            step_t += 1
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            step = step_t.item()
            bias_correction1 = 1 - beta1**step
            bias_correction2_sqrt = (1 - beta2**step) ** 0.5
            denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
            param.addcdiv_(exp_avg, denom, value=-(lr / bias_correction1))

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
                "step": torch.tensor(float(slots["step"])),
                "exp_avg": torch.as_tensor(slots["exp_avg"]).to(param.device, param.dtype).clone(),
                "exp_avg_sq": torch.as_tensor(slots["exp_avg_sq"]).to(param.device, param.dtype).clone(),
            }
