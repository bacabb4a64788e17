"""Fake (meta) implementations, so torch.compile can trace the ops without running them."""

import torch

from ._fp8 import FP8_DTYPE
from ._ops import add_op_namespace_prefix


def _check_same_device(t: torch.Tensor, name: str, x: torch.Tensor, x_name: str = "x") -> None:
    torch._check(t.device == x.device,
                 lambda: f"{name} must be on the same device as {x_name} ({x.device}), got {t.device}")


@torch.library.register_fake(add_op_namespace_prefix("rms_norm"))
def _rms_norm_fake(out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    _check_same_device(weight, "weight", x)
    _check_same_device(out, "out", x)
    torch._check(out.shape == x.shape, lambda: f"out must have the shape of x {tuple(x.shape)}")
    torch._check(weight.dim() == 1 and weight.shape[0] == x.shape[-1],
                 lambda: f"weight must have shape [{x.shape[-1]}], got {tuple(weight.shape)}")


@torch.library.register_fake(add_op_namespace_prefix("fused_add_rms_norm"))
def _fused_add_rms_norm_fake(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                             eps: float) -> None:
    _check_same_device(weight, "weight", x)
    _check_same_device(residual, "residual", x)
    torch._check(residual.shape == x.shape, lambda: f"residual must have the shape of x {tuple(x.shape)}")
    torch._check(weight.dim() == 1 and weight.shape[0] == x.shape[-1],
                 lambda: f"weight must have shape [{x.shape[-1]}], got {tuple(weight.shape)}")


def _check_norm_fp8(out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, residual) -> None:
    _check_same_device(weight, "weight", x)
    _check_same_device(out, "out", x)
    torch._check(out.shape == x.shape, lambda: f"out must have the shape of x {tuple(x.shape)}")
    torch._check(out.dtype == FP8_DTYPE, lambda: f"out must be {FP8_DTYPE}, got {out.dtype}")
    torch._check(weight.dim() == 1 and weight.shape[0] == x.shape[-1],
                 lambda: f"weight must have shape [{x.shape[-1]}], got {tuple(weight.shape)}")
    if residual is not None:
        _check_same_device(residual, "residual", x)
        torch._check(residual.shape == x.shape,
                     lambda: f"residual must have the shape of x {tuple(x.shape)}")


@torch.library.register_fake(add_op_namespace_prefix("rms_norm_fp8"))
def _rms_norm_fp8_fake(out, x, weight, scale, eps, residual) -> None:
    _check_norm_fp8(out, x, weight, residual)
    _check_same_device(scale, "scale", x)


@torch.library.register_fake(add_op_namespace_prefix("rms_norm_fp8_dynamic"))
def _rms_norm_fp8_dynamic_fake(out, scales, x, weight, eps, residual) -> None:
    _check_norm_fp8(out, x, weight, residual)
    _check_same_device(scales, "scales", x)
    torch._check(scales.shape == (*x.shape[:-1], 1),
                 lambda: f"scales must have shape {(*x.shape[:-1], 1)}, got {tuple(scales.shape)}")
@torch.library.register_fake(add_op_namespace_prefix("layer_norm"))
def _layer_norm_fake(out, x, weight, bias, eps) -> None:
    _check_same_device(out, "out", x)
    torch._check(out.shape == x.shape, lambda: f"out must have the shape of x {tuple(x.shape)}")
    for t, name in ((weight, "weight"), (bias, "bias")):
        if t is not None:
            _check_same_device(t, name, x)
            torch._check(t.dim() == 1 and t.shape[0] == x.shape[-1],
                         lambda: f"{name} must have shape [{x.shape[-1]}], got {tuple(t.shape)}")


def _check_halved_out(out: torch.Tensor, x: torch.Tensor) -> None:
    _check_same_device(out, "out", x)
    torch._check(x.dim() >= 1 and x.shape[-1] % 2 == 0,
                 lambda: f"x must have an even last dimension, got shape {tuple(x.shape)}")
    torch._check(out.shape == (*x.shape[:-1], x.shape[-1] // 2),
                 lambda: f"out must have shape {(*x.shape[:-1], x.shape[-1] // 2)}, got {tuple(out.shape)}")


@torch.library.register_fake(add_op_namespace_prefix("silu_and_mul"))
def _silu_and_mul_fake(out: torch.Tensor, x: torch.Tensor) -> None:
    _check_halved_out(out, x)


@torch.library.register_fake(add_op_namespace_prefix("silu_and_mul_fp8"))
def _silu_and_mul_fp8_fake(out: torch.Tensor, x: torch.Tensor, scale: torch.Tensor) -> None:
    _check_halved_out(out, x)
    torch._check(out.dtype == FP8_DTYPE, lambda: f"out must be {FP8_DTYPE}, got {out.dtype}")
    _check_same_device(scale, "scale", x)
    torch._check(scale.dtype == torch.float32 and scale.numel() == 1,
                 lambda: f"scale must be a one-element float32 tensor, got {scale.dtype} {tuple(scale.shape)}")


@torch.library.register_fake(add_op_namespace_prefix("silu_mul"))
def _silu_mul_fake(out: torch.Tensor, gate: torch.Tensor, up: torch.Tensor) -> None:
    for t, name in ((up, "up"), (out, "out")):
        _check_same_device(t, name, gate, "gate")
        torch._check(t.shape == gate.shape,
                     lambda: f"{name} must have the shape of gate {tuple(gate.shape)}, got {tuple(t.shape)}")


@torch.library.register_fake(add_op_namespace_prefix("silu"))
def _silu_fake(out: torch.Tensor, x: torch.Tensor) -> None:
    _check_same_device(out, "out", x)
    torch._check(out.shape == x.shape, lambda: f"out must have the shape of x {tuple(x.shape)}")


# GGUF k-quants: bytes per 256-weight block of each format (gguf_blocks.BLOCK_BYTES).
_KQUANT_BYTES = {"q4_k": 144, "q6_k": 210}


def _check_quantized(q: torch.Tensor, size: int) -> int:
    torch._check(q.dtype == torch.uint8, lambda: f"q must be uint8, got {q.dtype}")
    torch._check(q.dim() == 2 and q.shape[1] % size == 0,
                 lambda: f"q must have shape [N, K / 256 * {size}], got {tuple(q.shape)}")
    return q.shape[1] // size * 256


def _register_kquant_fakes(fmt: str, gemv: str) -> None:
    size = _KQUANT_BYTES[fmt]

    @torch.library.register_fake(add_op_namespace_prefix(f"quantize_{fmt}"))
    def _quantize_fake(out, weight, imatrix) -> None:
        _check_same_device(out, "out", weight, "weight")
        torch._check(weight.dim() == 2 and weight.shape[1] % 256 == 0,
                     lambda: f"weight must be [N, K] with K a multiple of 256, got {tuple(weight.shape)}")
        torch._check(out.shape == (weight.shape[0], weight.shape[1] // 256 * size),
                     lambda: f"out must have shape {(weight.shape[0], weight.shape[1] // 256 * size)}")

    @torch.library.register_fake(add_op_namespace_prefix(f"dequantize_{fmt}"))
    def _dequantize_fake(out, q) -> None:
        _check_same_device(out, "out", q, "q")
        k = _check_quantized(q, size)
        torch._check(out.shape == (q.shape[0], k), lambda: f"out must have shape {(q.shape[0], k)}")

    @torch.library.register_fake(add_op_namespace_prefix(gemv))
    def _gemv_fake(out, x, q) -> None:
        _check_same_device(out, "out", x)
        if q.dim() == 3:  # the tiled layout: N from out (gguf_blocks.tile)
            torch._check(q.shape[2] == 16 * size, lambda: f"tiled q is [tiles, K / 256, {16 * size}], got {tuple(q.shape)}")
            k = q.shape[1] * 256
            torch._check(out.dim() == 2 and out.shape[0] == x.shape[0] and q.shape[0] * 16 - 16 < out.shape[1]
                         <= q.shape[0] * 16, lambda: f"out must be [M, N] with N in the tiles' rows, got {tuple(out.shape)}")
        else:
            k = _check_quantized(q, size)
            torch._check(out.shape == (x.shape[0], q.shape[0]),
                         lambda: f"out must have shape {(x.shape[0], q.shape[0])}")
        torch._check(x.dim() == 2 and x.shape[1] == k, lambda: f"x must have shape [M, {k}]")


_register_kquant_fakes("q4_k", "q4k_gemv")
_register_kquant_fakes("q6_k", "q6k_gemv")


@torch.library.register_fake(add_op_namespace_prefix("matmul"))
def _matmul_fake(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    _check_same_device(b, "b", a, "a")
    _check_same_device(out, "out", a, "a")
    torch._check(a.dim() == 2 and b.dim() == 2 and a.shape[1] == b.shape[0],
                 lambda: f"a [M, K] and b [K, N] expected, got {tuple(a.shape)} and {tuple(b.shape)}")
    torch._check(out.shape == (a.shape[0], b.shape[1]),
                 lambda: f"out must have shape {(a.shape[0], b.shape[1])}, got {tuple(out.shape)}")


@torch.library.register_fake(add_op_namespace_prefix("skinny_gemm_fp8"))
def _skinny_gemm_fp8_fake(out, a, b, scale_a, scale_b, bias, config=()) -> None:
    for t, name in ((b, "b"), (out, "out"), (scale_a, "scale_a"), (scale_b, "scale_b")):
        _check_same_device(t, name, a, "a")
    torch._check(a.dim() == 2 and b.dim() == 2 and b.shape[1] == a.shape[1],
                 lambda: f"a must be [M, K] and b [N, K], got {tuple(a.shape)} and {tuple(b.shape)}")
    torch._check(out.shape == (a.shape[0], b.shape[0]),
                 lambda: f"out must have shape {(a.shape[0], b.shape[0])}, got {tuple(out.shape)}")
    torch._check(out.dtype in (torch.bfloat16, torch.float16),
                 lambda: f"out must be bfloat16 or float16, got {out.dtype}")
    if bias is not None:
        _check_same_device(bias, "bias", a, "a")
        torch._check(bias.shape == (b.shape[0],), lambda: f"bias must have shape [{b.shape[0]}]")
