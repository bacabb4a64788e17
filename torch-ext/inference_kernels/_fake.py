"""Fake (meta) implementations, so torch.compile can trace the ops without running them."""

import torch

from ._ops import add_op_namespace_prefix


@torch.library.register_fake(add_op_namespace_prefix("rms_norm"))
def _rms_norm_fake(out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    torch._check(out.shape == x.shape, lambda: f"out must have the shape of x {tuple(x.shape)}")
    torch._check(weight.dim() == 1 and weight.shape[0] == x.shape[-1],
                 lambda: f"weight must have shape [{x.shape[-1]}], got {tuple(weight.shape)}")


@torch.library.register_fake(add_op_namespace_prefix("fused_add_rms_norm"))
def _fused_add_rms_norm_fake(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                             eps: float) -> None:
    torch._check(residual.shape == x.shape, lambda: f"residual must have the shape of x {tuple(x.shape)}")
    torch._check(weight.dim() == 1 and weight.shape[0] == x.shape[-1],
                 lambda: f"weight must have shape [{x.shape[-1]}], got {tuple(weight.shape)}")
