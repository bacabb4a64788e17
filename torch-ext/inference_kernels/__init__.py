"""inference-kernels: fused LLM-inference kernels behind one API.

Load it as users do:

    from kernels import get_kernel
    ik = get_kernel("inference-kernels/inference-kernels", version=1)
    y = ik.rms_norm(x, weight, 1e-6)
"""

from typing import Optional

import torch

from . import layers
from ._ops import ops
from . import _fake  # noqa: F401  (registers the fake implementations for torch.compile)

__all__ = ["rms_norm", "fused_add_rms_norm", "layers"]


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
