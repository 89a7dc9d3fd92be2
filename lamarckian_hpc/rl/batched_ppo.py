"""PPO updates of several population members at once, over their stacked parameters.

PBT+PPO, EMOGI and the league train many members with one architecture, each updated alone by
`ppo_update`: for the small networks they use on the CPU (two (64,64) MLPs, minibatches of 64), a
step is a few dozen tiny kernels and the time goes to per-op overhead, not arithmetic. Here the
members' parameters live stacked in one [M, N] buffer (member by row, each parameter a view of a
column range), every linear layer is one batched matmul over the members, and gradient clipping
and Adam are a handful of ops on the whole [M, N] buffer. Learning per member is unchanged: each
member keeps its own minibatch order (its own rng), learning rate, eps, clip range, loss weights,
max grad norm, advantage normalisation and number of epochs, and a member whose loss or gradient
norm is not finite skips that step (moments and step count untouched) as `GuardedSteps` does,
while the others step.

Why hand-written batched layers and not `torch.func.vmap(functional_call)`: measured on this
2-core machine (threads 1, the PBT model, minibatch 64), forward plus backward took 0.97 ms with
`baddbmm` against 1.9 ms with vmap for 4 members and 2.7 against 3.6 ms for 16 (0.65 ms for one
member alone): vmap's per-op dispatch costs about as much as the arithmetic at these sizes. The
layers that appear in `ActorCritic` MLPs (Sequential, Linear, FloatFlatten, elementwise
activations) and both heads are batched by hand; any other submodule (the CNN encoder) falls back
to vmap over `functional_call`, so every `ActorCritic` can be batched. The log-probability and
entropy of both heads are re-implemented on [M, B, ...] tensors, term for term as in
`models/heads.py`.

The stack is the truth between `load_members()` and `write_back()`: a caller whose members live as
separate learners loads once, updates, and writes the parameters and Adam states back into the
members' own modules and optimizers (state layout of `rl/adam.py` and `torch.optim.Adam`), or calls
`batched_ppo_update`, which does all three.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor, nn

from ..config import PPOConfig
from ..models import ActorCritic, CategoricalHead, GaussianHead
from ..models.heads import masked_logits
from ..models.layers import FloatFlatten
from .adam import Adam
from .optim import NONFINITE_STEPS
from .ppo import RolloutBatch

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)  # as in models/heads.py
#: The loss parts averaged in the diagnostics, in `ppo_loss`'s order.
PARTS = ("loss_policy", "loss_value", "entropy", "approx_kl", "clip_fraction")
#: Modules without parameters that act elementwise, so they apply to [M, B, F] as they are.
_ELEMENTWISE = (nn.Tanh, nn.ReLU, nn.LeakyReLU, nn.ELU, nn.GELU, nn.SiLU, nn.Sigmoid, nn.Identity)


class _Settings(NamedTuple):
    """One update's per-member hyperparameters as tensors shaped to broadcast against [M, ...]."""

    lr: Tensor  # [M] float64: the bias-corrected step size is computed in double, as Adam does
    eps: Tensor  # [M, 1]
    low: Tensor  # [M, 1] 1 - clip_range
    high: Tensor  # [M, 1] 1 + clip_range
    clip: Tensor  # [M, 1]
    policy_weight: Tensor  # [M]
    value_weight: Tensor  # [M]
    entropy_weight: Tensor  # [M]
    max_grad_norm: Tensor  # [M]
    normalize: Tensor  # [M, 1] bool


class BatchedPPO:
    """PPO updates of members that share an architecture, as one batched step per minibatch.

    `models[i]` is trained by `optimizers[i]` (`rl.adam.Adam` or `torch.optim.Adam`, one group over
    exactly `models[i].parameters()`, no weight decay) with `configs[i]`. The learning rate is each
    optimizer's `param_groups[0]["lr"]` at the time of `update`, as in `ppo_update` (so a learner's
    annealing or PBT's new rates apply); `configs` may be replaced with every update.
    """

    def __init__(self, models: Sequence[ActorCritic], optimizers: Sequence[Adam | torch.optim.Adam],
                 configs: Sequence[PPOConfig]) -> None:
        if not models or len(models) != len(optimizers) or len(models) != len(configs):
            raise ValueError(f"BatchedPPO needs one optimizer and one config per model, got {len(models)} models, "
                             f"{len(optimizers)} optimizers and {len(configs)} configs")
        self.models, self.optimizers, self.configs = list(models), list(optimizers), list(configs)
        first = self.models[0]
        named = list(first.named_parameters())
        if not isinstance(first, ActorCritic) or type(first.head) not in (CategoricalHead, GaussianHead):
            raise ValueError("BatchedPPO batches ActorCritic models with a CategoricalHead or GaussianHead")
        if list(first.buffers()) or not all(p.requires_grad and p.is_floating_point() for _, p in named):
            raise ValueError("BatchedPPO needs models without buffers whose parameters all require grad")
        self.device, self.dtype = named[0][1].device, named[0][1].dtype
        signature = (repr(first), first.local_size, [(name, p.shape, p.dtype, p.device) for name, p in named])
        for index, model in enumerate(self.models):
            params = list(model.named_parameters())
            if (repr(model), model.local_size, [(n, p.shape, p.dtype, p.device) for n, p in params]) != signature:
                raise ValueError(f"member {index} has another architecture, dtype or device than member 0; "
                                 "only members with the same model can be batched")
            _check_optimizer(index, self.optimizers[index], [p for _, p in params])
        offsets = np.cumsum([0] + [p.numel() for _, p in named])
        #: (name, first column, number of columns, shape) of each parameter in the stacked buffer.
        self.layout = [(name, int(offsets[i]), p.numel(), tuple(p.shape)) for i, (name, p) in enumerate(named)]
        # The structure to walk, without state of its own: meta tensors, replaced in every call.
        self.template = copy.deepcopy(first).to("meta")
        self.betas: tuple[float, float] = tuple(self.optimizers[0].param_groups[0]["betas"])  # set by each update
        self.load_members()

    @property
    def num_members(self) -> int:
        return len(self.models)

    def load_members(self) -> None:
        """(Re)build the stack from the members' modules and optimizers: at construction, and after
        anything outside wrote into them (a PBT exploit copying weights, a checkpoint load)."""
        with torch.no_grad():
            rows = [torch.cat([p.detach().reshape(-1) for p in model.parameters()]) for model in self.models]
            self.flat = torch.stack(rows).requires_grad_(True)  # a leaf; every step takes views of it
            self.exp_avg = torch.zeros_like(self.flat)
            self.exp_avg_sq = torch.zeros_like(self.flat)
            steps = []
            for index, (model, optimizer) in enumerate(zip(self.models, self.optimizers)):
                states = [optimizer.state.get(p) for p in model.parameters()]
                if all(not state for state in states):
                    steps.append(0.0)
                    continue
                counts = {float(state["step"]) for state in states if state}
                if any(not state for state in states) or len(counts) != 1:
                    raise ValueError(f"member {index}: its Adam state covers some parameters or counts steps "
                                     "differently among them; BatchedPPO keeps one step count per member")
                steps.append(counts.pop())
                self.exp_avg[index] = torch.cat([state["exp_avg"].reshape(-1) for state in states]).to(self.device)
                self.exp_avg_sq[index] = torch.cat([s["exp_avg_sq"].reshape(-1) for s in states]).to(self.device)
            self.steps = torch.tensor(steps, dtype=torch.float64, device=self.device)

    def write_back(self) -> None:
        """Copy each member's parameters and Adam moments into its own module and optimizer. A member
        that has never stepped keeps an empty optimizer state, as `Adam` does."""
        steps = self.steps.tolist()
        with torch.no_grad():
            for index, (model, optimizer) in enumerate(zip(self.models, self.optimizers)):
                for param, (_, start, count, shape) in zip(model.parameters(), self.layout):
                    param.copy_(self.flat[index, start : start + count].view(shape))
                    if steps[index] > 0:
                        optimizer.state[param] = {
                            "step": torch.tensor(steps[index]),
                            "exp_avg": self.exp_avg[index, start : start + count].reshape(shape).clone(),
                            "exp_avg_sq": self.exp_avg_sq[index, start : start + count].reshape(shape).clone(),
                        }

    def update(self, batches: Sequence[RolloutBatch], rngs: Sequence[np.random.Generator],
               configs: Sequence[PPOConfig] | None = None) -> list[dict[str, float]]:
        """What `ppo_update(models[i], optimizers[i], batches[i], configs[i], rngs[i])` does for every
        member i, on the stack (call `write_back` to see it in the modules). Returns each member's
        diagnostics as `ppo_update` gives them. Members need equal batch and minibatch sizes."""
        if configs is not None:
            if len(configs) != self.num_members:
                raise ValueError(f"got {len(configs)} configs for {self.num_members} members")
            self.configs = list(configs)
        if len(batches) != self.num_members or len(rngs) != self.num_members:
            raise ValueError(f"got {len(batches)} batches and {len(rngs)} rngs for {self.num_members} members")
        size = len(batches[0])
        shapes = [tuple(tuple(field.shape) for field in batch) for batch in batches]
        if any(len(batch) != size for batch in batches) or len(set(shapes)) != 1:
            raise ValueError(f"members can be batched only with equal batch sizes and shapes; got sizes "
                             f"{[len(batch) for batch in batches]}")
        minibatch_sizes = {min(config.minibatch_size, size) for config in self.configs}
        if len(minibatch_sizes) != 1:
            raise ValueError(f"members can be batched only with equal minibatch sizes; got "
                             f"{[min(config.minibatch_size, size) for config in self.configs]}")
        minibatch_size = minibatch_sizes.pop()
        settings = self._settings()
        fields = [torch.stack([batch[i].to(self.device) for batch in batches]) for i in range(len(batches[0]._fields))]
        epochs = [config.num_epochs for config in self.configs]
        # Each member's orders come from its own rng, one permutation per epoch of its own, as in ppo_update.
        orders = np.stack([np.stack([rng.permutation(size) if epoch < epochs[m] else np.arange(size)
                                     for epoch in range(max(epochs))]) for m, rng in enumerate(rngs)])
        orders_t = torch.from_numpy(orders).to(self.device)
        sums = torch.zeros(self.num_members, len(PARTS), dtype=torch.float64, device=self.device)
        taken = torch.zeros(self.num_members, dtype=torch.int64, device=self.device)
        skipped = torch.zeros_like(taken)
        rows = torch.arange(self.num_members, device=self.device)[:, None]
        for epoch in range(max(epochs)):
            active = torch.tensor([epoch < count for count in epochs], device=self.device)
            shuffled = [field[rows, orders_t[:, epoch]] for field in fields]
            for start in range(0, size - minibatch_size + 1, minibatch_size):
                minibatch = RolloutBatch(*(field[:, start : start + minibatch_size] for field in shuffled))
                ok, parts = self._step(minibatch, settings, active)
                sums += torch.where(ok[:, None], parts, 0.0)
                taken += ok
                skipped += active & ~ok
        results = []
        for total, count, bad in zip(sums.tolist(), taken.tolist(), skipped.tolist()):
            means = {name: value / count for name, value in zip(PARTS, total)} if count else {}
            results.append({**means, NONFINITE_STEPS: float(bad)})
        return results

    def _settings(self) -> _Settings:
        groups = [optimizer.param_groups[0] for optimizer in self.optimizers]
        if len({tuple(group["betas"]) for group in groups}) != 1:
            raise ValueError(f"members can be batched only with equal Adam betas; got {[g['betas'] for g in groups]}")
        self.betas = tuple(groups[0]["betas"])

        def column(values: list[float], dtype: torch.dtype | None = None) -> Tensor:
            return torch.tensor(values, dtype=dtype or self.dtype, device=self.device)

        configs = self.configs
        return _Settings(
            lr=column([float(group["lr"]) for group in groups], torch.float64),
            eps=column([float(group["eps"]) for group in groups])[:, None],
            low=column([1.0 - c.clip_range for c in configs])[:, None],
            high=column([1.0 + c.clip_range for c in configs])[:, None],
            clip=column([c.clip_range for c in configs])[:, None],
            policy_weight=column([c.policy_weight for c in configs]),
            value_weight=column([c.value_weight for c in configs]),
            entropy_weight=column([c.entropy_weight for c in configs]),
            max_grad_norm=column([c.max_grad_norm for c in configs]),
            normalize=torch.tensor([c.normalize_advantages for c in configs], device=self.device)[:, None],
        )

    def _step(self, batch: RolloutBatch, settings: _Settings, active: Tensor) -> tuple[Tensor, Tensor]:
        """One minibatch for every member: loss, gradient, clipping, guarded Adam. Nothing here waits
        for a value (no `.item()`): which members stepped comes back as a [M] mask."""
        views = {name: self.flat[:, start : start + count].view(-1, *shape)
                 for name, start, count, shape in self.layout}
        log_probs, entropy, values = self._evaluate(views, batch.observations, batch.actions)
        advantages = batch.advantages
        if advantages.shape[1] >= 2:  # `normalize` leaves a single row as it is
            normalized = (advantages - advantages.mean(1, keepdim=True)) / (advantages.std(1, keepdim=True) + 1e-8)
            advantages = torch.where(settings.normalize, normalized, advantages)
        ratio = torch.exp(log_probs - batch.old_log_probs)
        policy = -torch.minimum(ratio * advantages, ratio.clamp(settings.low, settings.high) * advantages).mean(1)
        critic = 0.5 * (values - batch.returns).pow(2).mean(1)
        entropy_mean = entropy.mean(1)
        total = (settings.policy_weight * policy + settings.value_weight * critic
                 - settings.entropy_weight * entropy_mean)
        # Members' losses share no parameters, so the gradient of the sum is each member's own gradient;
        # a non-finite member poisons only its own row, which the mask then leaves out. The gradient is
        # taken at the views and joined once: through the views to `flat`, autograd would zero-fill and
        # add an [M, N] tensor per parameter.
        grads = torch.autograd.grad(total.sum(), list(views.values()))
        with torch.no_grad():
            grad = torch.cat([g.reshape(g.shape[0], -1) for g in grads], dim=1)
            norm = torch.linalg.vector_norm(grad, dim=1)
            grad = grad * torch.clamp(settings.max_grad_norm / (norm + 1e-6), max=1.0)[:, None]
            ok = active & torch.isfinite(total) & torch.isfinite(norm)
            self._adam(grad, ok, settings)
            log_ratio = log_probs.detach() - batch.old_log_probs
            ratio_minus_one = log_ratio.exp() - 1.0
            approx_kl = (ratio_minus_one - log_ratio).mean(1)
            clip_fraction = (ratio_minus_one.abs() > settings.clip).float().mean(1)
            parts = torch.stack([policy.detach(), critic.detach(), entropy_mean.detach(), approx_kl, clip_fraction], 1)
        return ok, parts.double()

    def _adam(self, grad: Tensor, ok: Tensor, settings: _Settings) -> None:
        """`rl/adam.py`'s step, row by row with each member's lr, eps and step count, for the rows in
        `ok`; the other rows keep parameters, moments and count."""
        beta1, beta2 = self.betas
        mask = ok[:, None]
        taken = mask.to(self.dtype)
        # A skipped row gets a zero gradient and zero weights, which leave its values exactly as they
        # were: one `where` for the gradient (it may hold NaN), then in-place ops for all rows.
        grad = torch.where(mask, grad, 0.0)
        self.steps += ok
        self.exp_avg.lerp_(grad, (1 - beta1) * taken)
        self.exp_avg_sq.mul_(torch.where(mask, beta2, 1.0).to(self.dtype)).addcmul_(grad, grad, value=1 - beta2)
        counts = self.steps.clamp(min=1.0)  # a member not stepped yet gets a finite, unused correction
        step_sizes = ((settings.lr / (1 - beta1**counts)) * -1).to(self.dtype)[:, None] * taken
        bias_correction2_sqrt = ((1 - beta2**counts) ** 0.5).to(self.dtype)[:, None]
        denominators = self.exp_avg_sq.sqrt() / bias_correction2_sqrt + settings.eps
        self.flat.add_(step_sizes * self.exp_avg / denominators)

    def _evaluate(self, params: dict[str, Tensor], observations: Tensor,
                  actions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """`ActorCritic.evaluate` for every member: [M, B] log-probabilities, entropies and values."""
        model = self.template
        own = observations if model.local_size is None else observations[..., : model.local_size]
        features = self._forward(model.trunk, "trunk.", params, own)
        log_probs, entropy = self._head(params, features, actions, model.legal(own))
        critic_features = features if model.critic_trunk is None else \
            self._forward(model.critic_trunk, "critic_trunk.", params, observations)
        return log_probs, entropy, self._forward(model.critic, "critic.", params, critic_features).squeeze(-1)

    def _head(self, params: dict[str, Tensor], features: Tensor, actions: Tensor,
              legal: Tensor | None) -> tuple[Tensor, Tensor]:
        """`log_prob_entropy` of the model's head, term for term, on [M, B, ...] tensors (illegal
        actions masked as `heads.masked_logits` masks them)."""
        head = self.template.head
        if isinstance(head, CategoricalHead):
            logits = masked_logits(self._forward(head.logits, "head.logits.", params, features), legal)
            log_probs = torch.log_softmax(logits, dim=-1)
            chosen = log_probs.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
            return chosen, -(log_probs.exp() * log_probs).sum(-1)
        mean = self._forward(head.mean, "head.mean.", params, features)
        log_std = params["head.log_std"].unsqueeze(1)  # [M, 1, A]: state-independent
        z = (actions - mean) * torch.exp(-log_std)
        log_prob = (-0.5 * z.pow(2) - log_std - _LOG_SQRT_2PI).sum(-1)
        entropy = (0.5 + _LOG_SQRT_2PI + log_std).sum(-1).expand(mean.shape[:2])
        return log_prob, entropy

    def _forward(self, module: nn.Module, prefix: str, params: dict[str, Tensor], x: Tensor) -> Tensor:
        """`module(x)` for every member, x being [M, B, ...] and module's parameters `params[prefix...]`."""
        if isinstance(module, nn.Sequential):
            for name, child in module.named_children():
                x = self._forward(child, f"{prefix}{name}.", params, x)
            return x
        if isinstance(module, nn.Linear) and x.dim() == 3:
            weight = params[prefix + "weight"].transpose(1, 2)
            if module.bias is None:
                return torch.bmm(x, weight)
            return torch.baddbmm(params[prefix + "bias"].unsqueeze(1), x, weight)
        if type(module) in (nn.Flatten, FloatFlatten) and (module.start_dim, module.end_dim) == (1, -1):
            x = x.flatten(2)
            return x.float() if isinstance(module, FloatFlatten) else x
        if isinstance(module, _ELEMENTWISE):
            return module(x)
        own = {name[len(prefix):]: value for name, value in params.items() if name.startswith(prefix)}

        def call(member_params: dict[str, Tensor], rows: Tensor) -> Tensor:
            return torch.func.functional_call(module, member_params, (rows,))

        return torch.func.vmap(call)(own, x)


def _check_optimizer(index: int, optimizer: Adam | torch.optim.Adam, params: list[Tensor]) -> None:
    """BatchedPPO replays `Adam`'s step: one group over the model's parameters in order, no extras."""
    groups = optimizer.param_groups
    if not isinstance(optimizer, (Adam, torch.optim.Adam)) or len(groups) != 1:
        raise ValueError(f"member {index}: BatchedPPO needs an Adam (rl.adam or torch.optim) with one group")
    group = groups[0]
    if len(group["params"]) != len(params) or any(a is not b for a, b in zip(group["params"], params)):
        raise ValueError(f"member {index}: its optimizer's parameters are not its model's, in order")
    if group.get("weight_decay", 0) or group.get("amsgrad") or group.get("maximize"):
        raise ValueError(f"member {index}: weight decay, AMSGrad and maximize are not batched")


def batched_ppo_update(models: Sequence[ActorCritic], optimizers: Sequence[Adam | torch.optim.Adam],
                       batches: Sequence[RolloutBatch], configs: Sequence[PPOConfig],
                       rngs: Sequence[np.random.Generator]) -> list[dict[str, float]]:
    """`ppo_update` for each member, batched: stack, update, write back. For members that stay
    batched across updates, keep a `BatchedPPO` instead and call `write_back` when needed."""
    batched = BatchedPPO(models, optimizers, configs)
    diagnostics = batched.update(batches, rngs)
    batched.write_back()
    return diagnostics
