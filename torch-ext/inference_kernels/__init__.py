"""inference-kernels: fused LLM-inference kernels behind one API.

Load it as users do:

    from kernels import get_kernel
    ik = get_kernel("inference-kernels/inference-kernels", version=1)
    y = ik.rms_norm(x, weight, 1e-6)
    h = ik.silu_and_mul(gate_up)        # SwiGLU: silu(gate) * up
"""

from typing import Optional, Tuple

import torch

from . import gguf_blocks, layers, quant
from ._ops import ops
from . import _fake  # noqa: F401  (registers the fake implementations for torch.compile)

__all__ = [
    "rms_norm",
    "fused_add_rms_norm",
    "rms_norm_fp8",
    "rms_norm_fp8_dynamic",
    "layer_norm",
    "silu_and_mul",
    "silu_and_mul_fp8",
    "silu_mul",
    "silu",
    "quantize_q4_k",
    "quantize_q6_k",
    "dequantize_q4_k",
    "dequantize_q6_k",
    "q4k_gemv",
    "q6k_gemv",
    "tile_q4k",
    "untile_q4k",
    "tile_q6k",
    "untile_q6k",
    "matmul",
    "skinny_gemm_fp8",
    "fp8_linear",
    "FP8_DTYPE",
    "gguf_blocks",
    "quant",
    "layers",
]

# float8_e4m3fn on the CPU and CUDA, float8_e4m3fnuz on ROCm (see _fp8.py).
from ._fp8 import FP8_DTYPE, FP8_MAX  # noqa: E402


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
    """RMSNorm quantised to ``FP8_DTYPE`` (float8_e4m3fn; e4m3fnuz, max 240, on ROCm) with a
    static per-tensor ``scale``.

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
    """RMSNorm quantised to ``FP8_DTYPE`` with one scale per row (per token); 240 for 448 on ROCm.

    ``scale_row = max(absmax(y_row) / 448, 1 / (448 * 512))``, ``out = fp8(y / scale_row)``;
    returns ``(out, scales)`` with ``scales`` float32 of shape ``x.shape[:-1] + (1,)``.
    ``residual`` as in :func:`rms_norm_fp8`.
    """
    out = torch.empty(x.shape, dtype=FP8_DTYPE, device=x.device)
    scales = torch.empty((*x.shape[:-1], 1), dtype=torch.float32, device=x.device)
    ops.rms_norm_fp8_dynamic(out, scales, x, weight, eps, residual)
    return out, scales
def layer_norm(x: torch.Tensor, weight: Optional[torch.Tensor] = None,
               bias: Optional[torch.Tensor] = None, eps: float = 1e-5,
               out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """LayerNorm over the last dimension, as ``F.layer_norm(x, x.shape[-1:], weight, bias, eps)``.

    ``(x - mean) * rsqrt(var + eps) * weight + bias`` with the biased variance; mean and
    variance in fp32 (two passes over the row), the result rounded once to x's dtype.
    ``x``: ``[..., d]`` float32/float16/bfloat16 with a contiguous last dimension;
    ``weight``, ``bias`` (optional): ``[d]`` of x's dtype. ``out`` may be ``x`` itself.
    """
    if out is None:
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
    ops.layer_norm(out, x, weight, bias, eps)
    return out


# SwiGLU family. Rounding, as HF's LlamaMLP (`act_fn(gate_proj(x)) * up_proj(x)` in
# the model dtype) and vLLM: s = silu(gate) in fp32 rounded to the dtype, then the
# product s * up in fp32 rounded to the dtype; silu(v) = v / (1 + exp(-v)).
# Inputs: float32/float16/bfloat16 with a contiguous last dimension; out never
# overlaps an input.


def _halved(x: torch.Tensor) -> tuple:
    return (*x.shape[:-1], x.shape[-1] // 2) if x.dim() else ()


def silu_and_mul(x: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``silu(x[..., :d]) * x[..., d:]`` for ``x`` of shape ``[..., 2d]`` (vLLM's layout).

    Returns (or fills) ``out`` of shape ``[..., d]`` and ``x``'s dtype.
    """
    if out is None:
        out = torch.empty(_halved(x), dtype=x.dtype, device=x.device)
    ops.silu_and_mul(out, x)
    return out


def silu_and_mul_fp8(x: torch.Tensor, scale: torch.Tensor,
                     out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``silu_and_mul(x)`` quantised to ``FP8_DTYPE`` (``torch.float8_e4m3fn``; e4m3fnuz, +-240,
    on ROCm) with a static per-tensor scale.

    ``q = fp8(clamp(y * (1 / scale), -448, 448))``, ``y`` the dtype-rounded
    ``silu_and_mul`` output; round to nearest even, NaN stays NaN. As vLLM, the
    kernel multiplies by the reciprocal of the scale (computed once in fp32), which
    can differ from ``y / scale`` in the last bit. ``scale``: a one-element float32
    tensor on ``x``'s device, read by the kernel (no host sync; CUDA-graph safe).
    """
    if out is None:
        out = torch.empty(_halved(x), dtype=FP8_DTYPE, device=x.device)
    ops.silu_and_mul_fp8(out, x, scale)
    return out


def silu_mul(gate: torch.Tensor, up: torch.Tensor,
             out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``silu(gate) * up`` for two tensors of one shape and dtype (an MLP's two projections)."""
    if out is None:
        out = torch.empty_like(gate, memory_format=torch.contiguous_format)
    ops.silu_mul(out, gate, up)
    return out


def silu(x: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``x / (1 + exp(-x))`` in fp32, rounded to ``x``'s dtype (``torch.nn.functional.silu``)."""
    if out is None:
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
    ops.silu(out, x)
    return out


# GGUF k-quants (Q4_K, Q6_K): a weight [N, K] (nn.Linear's layout, K a multiple of 256)
# is held as uint8 [N, K / 256 * 144] (Q4_K) or [N, K / 256 * 210] (Q6_K), the bytes of
# ggml's blocks, as a .gguf file stores them (gguf_blocks.py says the layouts).


def quantize_q4_k(weight: torch.Tensor, imatrix: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Quantise ``weight`` [N, K] to Q4_K bytes (uint8 [N, K / 256 * 144]).

    Each 32-weight sub-block's scale and min minimise ``sum(w * (x - deq)^2)`` with
    ``w = imatrix[col]`` (llama.cpp's importance matrix: the mean squared activation
    of each input column, see ``quant.collect_imatrix``) or, without one, ``w = 1``
    (the plain squared error). The weight is read as float32.

    ``imatrix``: ``[K]``, read as float32, finite and non-negative. Raises ValueError when
    the weight is not 2-D or K is not a multiple of 256, RuntimeError for a weight holding
    NaN or infinity (naming the row) and for an imatrix of another shape or with a
    negative or non-finite entry.
    """
    return quant.quantize(weight, "Q4_K", imatrix)


def quantize_q6_k(weight: torch.Tensor, imatrix: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Quantise ``weight`` [N, K] to Q6_K bytes (uint8 [N, K / 256 * 210]); as :func:`quantize_q4_k`."""
    return quant.quantize(weight, "Q6_K", imatrix)


def dequantize_q4_k(q: torch.Tensor, k: Optional[int] = None) -> torch.Tensor:
    """Q4_K bytes (uint8 [N, K / 256 * 144]) -> float32 [N, K]; equal to gguf-py's, bit for bit.

    ``k`` (optional) is checked against the K the bytes hold. Another dtype or shape of
    ``q``, or a ``k`` that does not match, raises ValueError.
    """
    return quant.dequantize(q, "Q4_K", k)


def dequantize_q6_k(q: torch.Tensor, k: Optional[int] = None) -> torch.Tensor:
    """Q6_K bytes [N, K / 256 * 210] -> float32 [N, K]; as :func:`dequantize_q4_k`."""
    return quant.dequantize(q, "Q6_K", k)


def q4k_gemv(x: torch.Tensor, q: torch.Tensor, n: Optional[int] = None) -> torch.Tensor:
    """``x @ dequantize_q4_k(q).T`` for ``x`` [M, K] with M in 1..8 (decode), in x's dtype.

    The weight is dequantised block by block as it is read, never as a whole; products
    are summed in fp32. ``x``: float32, float16 or bfloat16. ``q``: Q4_K rows, or the
    tiled layout of :func:`tile_q4k` with ``n`` the weight's rows (default: all of its
    tiles' rows), which the CUDA kernel reads faster (BENCHMARKS.md, fifteenth session);
    the same sums either way, bit for bit.
    """
    return quant.gemv(x, q, "Q4_K", n)


def q6k_gemv(x: torch.Tensor, q: torch.Tensor, n: Optional[int] = None) -> torch.Tensor:
    """``x @ dequantize_q6_k(q).T``; as :func:`q4k_gemv` (tiled: :func:`tile_q6k`)."""
    return quant.gemv(x, q, "Q6_K", n)


def tile_q4k(q: torch.Tensor) -> torch.Tensor:
    """Q4_K rows [N, K / 256 * 144] -> the tiled layout [ceil(N / 16), K / 256, 2304] that
    :func:`q4k_gemv` reads fastest on CUDA (the same blocks regrouped: a tile of 16 rows'
    blocks of one super-block together; common/ggml_blocks.h has the byte map). Do it once,
    when the weight is loaded; .gguf files keep the rows (:func:`untile_q4k`). Weights of a
    multiple of 16 rows concatenate tiled as they do as rows (``torch.cat`` on dim 0): a
    fused projection, such as q, k and v in one gemv."""
    return gguf_blocks.tile(q, "Q4_K")


def untile_q4k(qt: torch.Tensor, n: int) -> torch.Tensor:
    """The tiled layout back to Q4_K rows [n, K / 256 * 144], byte for byte."""
    return gguf_blocks.untile(qt, n, "Q4_K")


def tile_q6k(q: torch.Tensor) -> torch.Tensor:
    """Q6_K rows [N, K / 256 * 210] -> the tiled layout [ceil(N / 16), K / 256, 3360]; as
    :func:`tile_q4k`."""
    return gguf_blocks.tile(q, "Q6_K")


def untile_q6k(qt: torch.Tensor, n: int) -> torch.Tensor:
    """The tiled layout back to Q6_K rows [n, K / 256 * 210], byte for byte."""
    return gguf_blocks.untile(qt, n, "Q6_K")


def matmul(a: torch.Tensor, b: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``a @ b`` for ``a`` [M, K] and ``b`` [K, N] of one float dtype: products summed in
    fp32, the result rounded once to the dtype. CPU and MPS (Metal: 16x16 threadgroup
    tiles, or 8x8 simdgroup matrices for fp32 with M, N, K multiples of 8).
    ``out`` (optional): contiguous [M, N].
    """
    if out is None:
        shape = (a.shape[0], b.shape[1]) if a.dim() == 2 and b.dim() == 2 else (0, 0)
        out = torch.empty(shape, dtype=a.dtype, device=a.device)
    ops.matmul(out, a, b)
    return out


# FP8 GEMM for decode batch sizes. Operands are FP8_DTYPE: float8_e4m3fn on the CPU and
# CUDA, float8_e4m3fnuz on ROCm (rocm_kernels/skinny_gemm.hip); the weight keeps
# nn.Linear's [N, K] layout.

SKINNY_MAX_M = 32  # rows of `a` our CUDA kernel takes; more go to torch._scaled_mm
_E4M3 = torch.float8_e4m3fn  # the _scaled_mm route (CUDA only)


def _scaled_mm_takes(a: torch.Tensor, b: torch.Tensor, scale_b: torch.Tensor,
                     out_dtype: torch.dtype) -> bool:
    """Whether torch._scaled_mm (cuBLASLt) accepts these operands as they are: contiguous
    16-byte-aligned rows, K and N multiples of 16, and per-channel scales only with a
    bfloat16 output (its row-wise scaling)."""
    K, N = a.shape[1], b.shape[0]
    aligned = all(t.is_contiguous() and t.storage_offset() % 16 == 0 for t in (a, b))
    return (aligned and K % 16 == 0 and N % 16 == 0
            and (scale_b.numel() == 1 or out_dtype == torch.bfloat16))


def skinny_gemm_fp8(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor,
                    scale_b: torch.Tensor, out_dtype: Optional[torch.dtype] = None,
                    bias: Optional[torch.Tensor] = None,
                    out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``a @ b.T * scale_a * scale_b (+ bias)`` for fp8 operands, products summed in fp32
    (on CUDA at M <= 2 where convert 7 runs, 16 at a time in f16 first; in the fp8 MMA's
    accumulator, fewer bits than fp32, over 256 K bytes at most: README).

    ``a``: ``[M, K]`` ``FP8_DTYPE`` (``torch.float8_e4m3fn``; ``float8_e4m3fnuz`` on ROCm;
    K contiguous); ``b``: ``[N, K]`` of the same dtype (``nn.Linear``'s weight layout, K
    contiguous); ``scale_a``: one float32
    element; ``scale_b``: one float32 element, or ``N`` (per output channel); ``bias``:
    ``[N]`` in ``out_dtype``; returns (or fills) ``out`` ``[M, N]``, bfloat16 or float16.
    ``out_dtype`` defaults to ``out``'s dtype when ``out`` is given, else bfloat16; given
    both, they must agree (ValueError).
    Scales stay on the device (no host sync; CUDA-graph safe).

    On CUDA, M <= 32 (decode) runs our kernel: the weight streamed once at close to the
    memory bandwidth. Larger M goes to ``torch._scaled_mm`` (cuBLASLt) when it takes the
    operands (see ``_scaled_mm_takes``), else to our kernel, which then reads the weight
    once per 32 rows. Any N and K: rows that are 16-byte aligned with K % 16 == 0 take the
    fast path, anything else a slow byte path (correct, not fast). The CPU runs its own
    kernel for every M. ROCm (gfx942: fp8 MFMA; gfx90a: f16 MFMA) runs its kernel for every
    M (compiled and ISA-checked, never run on AMD hardware by this project).
    """
    M, N = a.shape[0], b.shape[0]
    if out is not None and out_dtype is not None and out.dtype != out_dtype:
        raise ValueError(f"out has dtype {out.dtype} but out_dtype is {out_dtype}: give one, or the same")
    if out_dtype is None:
        out_dtype = out.dtype if out is not None else torch.bfloat16
    if (a.device.type == "cuda" and M > SKINNY_MAX_M and a.dtype == _E4M3 and b.dtype == _E4M3
            and _scaled_mm_takes(a, b, scale_b, out_dtype)):
        if out is not None and (out.shape != (M, N) or out.device != a.device
                                or out_dtype not in (torch.bfloat16, torch.float16)):
            # What the kernel's own checks require of out, asked before cuBLAS runs.
            raise ValueError(f"out must be [{M}, {N}] bfloat16 or float16 on {a.device}, got "
                             f"{list(out.shape)} {out.dtype} on {out.device}")
        y = _via_scaled_mm(a, b, scale_a, scale_b, out_dtype, bias)
        return y if out is None else out.copy_(y)
    if out is None:
        out = torch.empty((M, N), dtype=out_dtype, device=a.device)
    ops.skinny_gemm_fp8(out, a, b, scale_a, scale_b, bias)
    return out


def _via_scaled_mm(a, b, scale_a, scale_b, out_dtype, bias):
    if scale_b.numel() == 1:
        return torch._scaled_mm(a, b.t(), scale_a=scale_a.reshape(()), scale_b=scale_b.reshape(()),
                                bias=bias, out_dtype=out_dtype)
    # Row-wise scaling wants [M, 1] and [1, N] float32 scales; the bias is added after.
    sa = scale_a.reshape(1, 1).expand(a.shape[0], 1).contiguous()
    y = torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=scale_b.reshape(1, -1),
                         out_dtype=out_dtype)
    return y if bias is None else y.add_(bias)


def fp8_linear(x: torch.Tensor, weight_fp8: torch.Tensor, weight_scale: torch.Tensor,
               input_scale: Optional[torch.Tensor] = None, bias: Optional[torch.Tensor] = None,
               out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """An FP8 ``nn.Linear``: quantise ``x`` per tensor, then :func:`skinny_gemm_fp8`.

    ``x``: ``[..., K]`` float32/float16/bfloat16; ``weight_fp8``: ``[N, K]`` ``FP8_DTYPE``
    (float8_e4m3fn; float8_e4m3fnuz, max 240 for 448 below, on ROCm) with ``weight_scale``
    (one float32 element, or ``N``); ``bias``: ``[N]`` in ``out_dtype`` (a bias of another
    dtype raises: cast it once when the layer is built); returns ``[..., N]`` in
    ``out_dtype`` (default: x's dtype for fp16/bf16, else bfloat16). Zero rows are allowed.
    ``x_q = fp8(clamp(x * (1 / s), -448, 448))`` with ``s = input_scale`` (static, one
    float32 element) or, without one, ``s = max(absmax(x) / 448, 1 / (448 * 512))``
    (dynamic, per tensor: the product stays on the device). Where a norm or SwiGLU
    precedes the projection, ``rms_norm_fp8`` / ``silu_and_mul_fp8`` produce ``x_q``
    directly and :func:`skinny_gemm_fp8` takes it from there.
    """
    K = x.shape[-1]
    x2 = x.reshape(-1, K)
    if input_scale is None:
        # No rows: amax has nothing to reduce; the floor scale (nothing is quantised).
        amax = x2.abs().amax().float() if x2.numel() else x2.new_zeros((), dtype=torch.float32)
        s = torch.clamp(amax / FP8_MAX, min=1.0 / (FP8_MAX * 512)).reshape(1)
    else:
        s = input_scale.reshape(1).float()
    q = (x2.float() * (1.0 / s)).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    if out_dtype is None:
        out_dtype = x.dtype if x.dtype in (torch.float16, torch.bfloat16) else torch.bfloat16
    y = skinny_gemm_fp8(q, weight_fp8, s, weight_scale, out_dtype, bias)
    return y.reshape(*x.shape[:-1], weight_fp8.shape[0])
