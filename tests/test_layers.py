"""The fast CPU tanh must be tanh: the same values and the same gradients, on every path."""

from __future__ import annotations

import torch

from lamarckian_hpc.models.layers import ACTIVATIONS, SIGMOID_TANH_MIN_ELEMENTS, Tanh, fully_connected


def test_tanh_matches_torch_values_and_gradients_on_large_inputs() -> None:
    generator = torch.Generator().manual_seed(0)
    # Large enough for the sigmoid path, with saturated and tiny values among them.
    x = torch.randn(4 * SIGMOID_TANH_MIN_ELEMENTS, generator=generator) * 6
    x[:4] = torch.tensor([0.0, 1e-8, -40.0, 40.0])
    ours, reference = x.clone().requires_grad_(), x.clone().requires_grad_()
    out, expected = Tanh()(ours), torch.tanh(reference)
    assert out.grad_fn is not None and "SigmoidTanh" in type(out.grad_fn).__name__  # the fast path ran
    torch.testing.assert_close(out, expected, rtol=0, atol=3e-7)
    assert out.abs().max() <= 1.0
    weights = torch.rand(x.shape, generator=generator) * 2 - 1  # |d(1 - y^2)| <= 2 |dy|
    (out * weights).sum().backward()
    (expected * weights).sum().backward()
    torch.testing.assert_close(ours.grad, reference.grad, rtol=0, atol=1e-6)


def test_tanh_double_precision_gradient_is_exact() -> None:
    x = torch.randn(SIGMOID_TANH_MIN_ELEMENTS, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(Tanh(), (x,), fast_mode=True)


def test_small_inputs_take_torch_tanh() -> None:
    x = torch.randn(8, 64, requires_grad=True)
    out = Tanh()(x)
    assert "TanhBackward" in type(out.grad_fn).__name__
    torch.testing.assert_close(out, torch.tanh(x))


def test_tanh_networks_use_it_and_keep_nn_tanh_identity() -> None:
    network = fully_connected(4, (64, 64), "tanh")
    tanhs = [module for module in network if isinstance(module, torch.nn.Tanh)]
    assert ACTIVATIONS["tanh"] is Tanh and len(tanhs) == 2 and all(type(m) is Tanh for m in tanhs)
    with torch.no_grad():
        rows = torch.randn(4096, 4)
        torch.testing.assert_close(network(rows), _reference(network, rows), rtol=0, atol=1e-6)


def _reference(network: torch.nn.Sequential, rows: torch.Tensor) -> torch.Tensor:
    for module in network:
        rows = torch.tanh(rows) if isinstance(module, Tanh) else module(rows)
    return rows
