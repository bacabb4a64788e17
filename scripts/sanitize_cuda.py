"""Runs every CUDA kernel of the package at odd sizes, for compute-sanitizer.

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck python3 scripts/sanitize_cuda.py
    ... python3 scripts/sanitize_cuda.py skinny_gemm    # only the FP8 GEMM's launches

Without the caching allocator every tensor is its own allocation, so an
out-of-bounds access is caught instead of landing in a neighbour's block.
"""

import os
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("LOCAL_KERNELS", f"inference-kernels/inference-kernels={ROOT / 'build'}")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import kernels  # noqa: E402


def activations(ik, rows, hidden, dtype, dev):
    """silu_and_mul(_fp8), silu_mul and silu: the 16-byte path (aligned, when hidden
    allows) and the one-element path (views one element in). Returns the launch count."""
    scale = torch.tensor([0.05], device=dev)
    x = torch.randn(rows, 2 * hidden, device=dev, dtype=dtype)
    gate = torch.randn(rows, hidden, device=dev, dtype=dtype)
    up = torch.randn(rows, hidden, device=dev, dtype=dtype)
    ik.silu_and_mul(x)
    ik.silu_and_mul_fp8(x, scale)
    ik.silu_mul(gate, up)
    ik.silu(gate)
    wide = torch.randn(rows, 2 * hidden + 1, device=dev, dtype=dtype)
    up_wide = torch.randn(rows, hidden + 1, device=dev, dtype=dtype)
    out8 = torch.empty(rows, hidden + 1, device=dev, dtype=torch.float8_e4m3fn)
    ik.silu_and_mul(wide[:, 1:])
    ik.silu_and_mul_fp8(wide[:, 1:], scale, out=out8[:, 1:])
    ik.silu_mul(gate, up_wide[:, 1:])
    ik.silu(up_wide[:, 1:])
    return 8


def layer_norms(ik, x, w, wide):
    """layer_norm with and without weight/bias, in place, on a misaligned view (the
    scalar path) and on a row long enough to stream (no register cache)."""
    ik.layer_norm(x, w, torch.randn_like(w), 1e-5)
    ik.layer_norm(x, None, None, 1e-5)
    ik.layer_norm(x, w, None, 1e-5, out=x)
    ik.layer_norm(wide[:, 1:], w, w, 1e-5)
    long = torch.randn(2, 40000, device=x.device, dtype=x.dtype)
    ik.layer_norm(long, None, torch.randn(40000, device=x.device, dtype=x.dtype), 1e-5)
    return 5


def skinny_gemms(ik, dev):
    """skinny_gemm_fp8 at odd sizes: every M slice (1-8, 9-16, 17-24, 25-32, > 32), odd N,
    K tails (a partial last chunk; K % 16 != 0, the byte path), a misaligned view, row
    strides, bias and per-channel scales, cluster and warp splits. The op is called
    directly (no torch._scaled_mm route). Returns the launch count."""
    fp8 = torch.float8_e4m3fn
    n_launch = 0
    for m, n, k in [(1, 1, 16), (3, 17, 80), (8, 129, 1040), (9, 33, 4096), (17, 2317, 272),
                    (32, 64, 6656 + 16), (33, 40, 128), (5, 23, 4099), (2, 7, 3)]:
        a = (torch.randn(m, k + 32, device=dev) * 3).to(fp8)
        b = (torch.randn(n, k, device=dev) * 3).to(fp8)
        sa = torch.tensor([0.01], device=dev)
        sb = torch.rand(n, device=dev) / 64
        bias = torch.randn(n, device=dev).bfloat16()
        out = torch.empty(m, n + 3, device=dev, dtype=torch.bfloat16)
        for cfg in ([], [1, 8, 4, 1], [2, 4, 2, 2], [1, 1, 8, 1]):
            ik.ops.skinny_gemm_fp8(out[:, :n], a[:, :k], b, sa, sb, bias, cfg)
            n_launch += 1
        ik.ops.skinny_gemm_fp8(out[:, 1:n + 1], a[:, 1:k + 1], b, sa, sb[:1], None)  # byte path
        ik.ops.skinny_gemm_fp8(out[:, :n].half(), a[:, :k], b, sa, sb[:1], bias.half())
        n_launch += 2
    return n_launch


def main():
    ik = kernels.get_kernel("inference-kernels/inference-kernels", version=1)
    dev = "cuda"
    if sys.argv[1:] == ["skinny_gemm"]:
        n = skinny_gemms(ik, dev)
        torch.cuda.synchronize()
        print(f"sanitize_cuda: {n} skinny_gemm_fp8 launches done")
        return 0
    n = 0
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for rows, hidden in [(1, 1), (3, 3), (5, 127), (2, 5120), (3, 16385), (1, 16384), (33, 4096)]:
            x = torch.randn(rows, hidden, device=dev, dtype=dtype)
            w = torch.randn(hidden, device=dev, dtype=dtype)
            ik.rms_norm(x, w, 1e-6)
            ik.fused_add_rms_norm(x, torch.randn_like(x), w, 1e-6)
            # A misaligned view: the scalar path.
            wide = torch.randn(rows, hidden + 1, device=dev, dtype=dtype)
            ik.rms_norm(wide[:, 1:], w, 1e-6)
            scale = torch.tensor([0.05], device=dev)
            ik.rms_norm_fp8(x, w, scale, 1e-6, residual=torch.randn_like(x))
            ik.rms_norm_fp8(wide[:, 1:], w, scale, 1e-6)
            ik.rms_norm_fp8_dynamic(x, w, 1e-6, residual=torch.randn_like(x))
            ik.rms_norm_fp8_dynamic(wide[:, 1:], w, 1e-6)
            n += 7
            n += layer_norms(ik, x, w, wide)
            n += activations(ik, rows, hidden, dtype, dev)
    n += skinny_gemms(ik, dev)
    torch.cuda.synchronize()
    print(f"sanitize_cuda: {n} launches done")


if __name__ == "__main__":
    sys.exit(main())
