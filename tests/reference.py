"""fp64 references and comparison helpers shared by the tests."""

import torch

# Relative-error budgets of the output against an fp64 reference: two roundings
# to the dtype (normalised value, then product with the weight).
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
POISON = float("nan")


def rms_norm_ref(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x64 = x.double()
    inv = torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps)
    return weight.double() * (x64 * inv)


def assert_close(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> None:
    assert out.dtype == dtype
    assert torch.isfinite(out).all(), "non-finite output (an element left unwritten?)"
    o, r = out.double().cpu(), ref.double().cpu()
    err = ((o - r).norm() / r.norm().clamp_min(1e-30)).item()
    assert err < TOL[dtype], f"relative error {err:.3g} over {TOL[dtype]:.1g}"
    # Element-wise too: a norm can hide a few wrong elements in a large tensor.
    tol = 4 * TOL[dtype] * r.abs().max().clamp_min(1e-30)
    worst = (o - r).abs().max().item()
    assert worst <= tol, f"worst element error {worst:.3g} over {tol.item():.3g}"


def poisoned_like(t: torch.Tensor) -> torch.Tensor:
    return torch.full_like(t, POISON)
