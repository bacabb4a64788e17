"""inference-kernels: fused LLM-inference kernels behind one API.

Load it as users do:

    from kernels import get_kernel
    ik = get_kernel("inference-kernels/inference-kernels", version=1)
    y = ik.rms_norm(x, weight, 1e-6)
"""

from typing import Optional, Tuple

import torch

from . import layers
from ._ops import ops
from . import _fake  # noqa: F401  (registers the fake implementations for torch.compile)

__all__ = [
    "rms_norm",
    "fused_add_rms_norm",
    "rms_norm_fp8",
    "rms_norm_fp8_dynamic",
    "FP8_DTYPE",
    "layers",
]

# The FP8 format of the CUDA and CPU backends (ROCm's gfx942 will use e4m3fnuz).
FP8_DTYPE = torch.float8_e4m3fn


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
             out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """RMSNorm over the last dimension, with HF LlamaRMSNorm's rounding.

    ``weight * (x * rsqrt(mean(x**2) + eps)).to(x.dtype)``, reduced in fp32.
    ``x``: ``[..., d]`` float32/float16/bfloat16 with a contiguous last dimension;
    ``weight``: ``[d]`` of the same dtype. ``out`` (optional) may be ``x`` itself.
    """
    if out is None:
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
    ops.rms_norm(out, x, weight, eps)
    return out


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                       eps: float = 1e-6) -> None:
    """In place, as vLLM: ``residual <- x + residual`` then ``x <- rms_norm(residual)``.

    The sum is rounded to the dtype before it is written and normalised, as HF
    transformers and vLLM do (FlashInfer normalises the unrounded sum).
    """
    ops.fused_add_rms_norm(x, residual, weight, eps)


def rms_norm_fp8(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, eps: float = 1e-6,
                 residual: Optional[torch.Tensor] = None,
                 out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """RMSNorm quantised to float8_e4m3fn with a static per-tensor ``scale``.

    ``out = fp8(clamp(y * (1 / scale), -448, 448))`` with ``y = rms_norm(x, weight, eps)``
    rounded to x's dtype first (vLLM's convention: multiply by the reciprocal of the
    one-element float32 ``scale``; saturate, keep NaN). With ``residual``:
    ``residual <- x + residual`` (in place, rounded to the dtype) and the sum is
    normalised; ``x`` is not written.
    """
    if out is None:
        out = torch.empty(x.shape, dtype=FP8_DTYPE, device=x.device)
    ops.rms_norm_fp8(out, x, weight, scale, eps, residual)
    return out


def rms_norm_fp8_dynamic(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
                         residual: Optional[torch.Tensor] = None
                         ) -> Tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm quantised to float8_e4m3fn with one scale per row (per token).

    ``scale_row = max(absmax(y_row) / 448, 1 / (448 * 512))``, ``out = fp8(y / scale_row)``;
    returns ``(out, scales)`` with ``scales`` float32 of shape ``x.shape[:-1] + (1,)``.
    ``residual`` as in :func:`rms_norm_fp8`.
    """
    out = torch.empty(x.shape, dtype=FP8_DTYPE, device=x.device)
    scales = torch.empty((*x.shape[:-1], 1), dtype=torch.float32, device=x.device)
    ops.rms_norm_fp8_dynamic(out, scales, x, weight, eps, residual)
    return out, scales
