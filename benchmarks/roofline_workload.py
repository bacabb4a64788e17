"""The workload benchmarks/roofline.py profiles under Nsight Compute: one op (ours or its
torch baseline) run a few times between cudaProfilerStart and cudaProfilerStop, so
`ncu --profile-from-start off` sees exactly that op's kernels, inputs and warm-up excluded.

    python benchmarks/roofline_workload.py --list
    python benchmarks/roofline_workload.py --op layer_norm/ours --reps 3
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

EPS = 1e-5
FP8 = torch.float8_e4m3fn
# (rows, hidden) of every norm and activation: large enough to be HBM-bound (tens of MB),
# the roofline tutorials' LayerNorm shape.
N, D = 4096, 4096
# The matmuls: issue 4's largest blog weight (218 MB of fp8) at decode's M = 1 and its
# M = 32; issue 6's Llama-3-8B gate/up weight (14336 x 4096) as Q4_K and Q6_K at M = 1.
GEMM_N, GEMM_K, GEMV_N, GEMV_K = 13312, 16384, 14336, 4096
# The matmuls' FLOPs are the op's 2 M N K: their products run on tensor cores (ours; cuBLAS's
# kernels may use either unit), which Nsight Compute's FP32 instruction counts miss.
MATMUL_FLOPS = {
    **{f"skinny_gemm_fp8_m{m}/{impl}": 2 * m * GEMM_N * GEMM_K for m in (1, 32) for impl in ("ours", "torch")},
    **{f"{g}/{impl}": 2 * GEMV_N * GEMV_K for g in ("q4k_gemv", "q6k_gemv") for impl in ("ours", "torch")},
}


def _norm_eager(x, w):
    xf = x.float()
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype)


def build(op: str, dev: str = "cuda"):
    """A zero-argument callable running `op` once on fresh inputs (made here, not profiled)."""
    family, impl = op.split("/")
    h = torch.float16
    x = torch.randn(N, D, device=dev, dtype=h)
    w = torch.randn(D, device=dev, dtype=h)
    b = torch.randn(D, device=dev, dtype=h)
    r = torch.randn(N, D, device=dev, dtype=h)
    gu = torch.randn(N, 2 * D, device=dev, dtype=torch.bfloat16)
    scale = torch.tensor([0.02], device=dev)
    k = None
    if impl == "ours" or family in ("q4k_gemv", "q6k_gemv"):  # the gemvs' baseline uses our dequantisation
        import harness

        k = harness.load_kernel()
    if family == "layer_norm":
        if impl == "ours":
            return lambda: k.layer_norm(x, w, b, EPS)
        if impl == "torch":
            return lambda: F.layer_norm(x, (D,), w, b, EPS)
        if impl == "naive":
            import naive_layer_norm

            naive = naive_layer_norm.load()
            if naive is None:
                raise SystemExit("naive kernel unavailable")
            return lambda: naive(x, w, b, EPS)
    if family == "rms_norm":
        return (lambda: k.rms_norm(x, w, EPS)) if impl == "ours" else (lambda: _norm_eager(x, w))
    if family == "fused_add_rms_norm":
        if impl == "ours":
            return lambda: k.fused_add_rms_norm(x, r, w, EPS)
        return lambda: _norm_eager(x + r, w)
    if family == "rms_norm_fp8":
        if impl == "ours":
            return lambda: k.rms_norm_fp8(x, w, scale, EPS)
        return lambda: (_norm_eager(x, w).float() * (1 / 0.02)).clamp(-448, 448).to(FP8)
    if family == "rms_norm_fp8_dynamic":
        if impl == "ours":
            return lambda: k.rms_norm_fp8_dynamic(x, w, EPS)

        def dynamic():
            y = _norm_eager(x, w).float()
            s = (y.abs().amax(-1, keepdim=True) / 448).clamp(min=1 / (448 * 512))
            return (y / s).to(FP8), s
        return dynamic
    if family == "silu_and_mul":
        if impl == "ours":
            return lambda: k.silu_and_mul(gu)
        return lambda: F.silu(gu[:, :D]) * gu[:, D:]
    if family == "silu_and_mul_fp8":
        if impl == "ours":
            return lambda: k.silu_and_mul_fp8(gu, scale)
        return lambda: ((F.silu(gu[:, :D]) * gu[:, D:]).float() * (1 / 0.02)).clamp(-448, 448).to(FP8)
    if family == "silu_mul":
        g, u = gu[:, :D].contiguous(), gu[:, D:].contiguous()
        return (lambda: k.silu_mul(g, u)) if impl == "ours" else (lambda: F.silu(g) * u)
    if family.startswith("skinny_gemm_fp8_m"):
        m = int(family.rsplit("m", 1)[1])
        a = (torch.randn(m, GEMM_K, device=dev) * 0.5).to(FP8)
        bw = (torch.randn(GEMM_N, GEMM_K, device=dev) * 0.5).to(FP8)
        sa, sb = torch.tensor([0.01], device=dev), torch.tensor([0.02], device=dev)
        if impl == "ours":
            return lambda: k.skinny_gemm_fp8(a, bw, sa, sb)
        return lambda: torch._scaled_mm(a, bw.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    if family in ("q4k_gemv", "q6k_gemv"):
        import bench_q4k

        fmt = "Q4_K" if family == "q4k_gemv" else "Q6_K"
        q = bench_q4k.random_q(GEMV_N, GEMV_K, fmt, dev)
        xv = torch.randn(1, GEMV_K, device=dev, dtype=h)
        if impl == "ours":
            qt = k.tile_q4k(q) if fmt == "Q4_K" else k.tile_q6k(q)
            gemv = k.q4k_gemv if fmt == "Q4_K" else k.q6k_gemv
            return lambda: gemv(xv, qt, GEMV_N)
        wh = (k.dequantize_q4_k(q) if fmt == "Q4_K" else k.dequantize_q6_k(q)).to(h)
        return lambda: F.linear(xv, wh)
    raise SystemExit(f"unknown op {op}")


# op -> Nsight Compute kernel-name filter (None: every kernel the op launches). The
# filters name the families (every layout's kernel of an op has its family's name in it).
OPS = {
    "layer_norm/ours": "regex:layer_norm",
    "layer_norm/torch": None,
    "layer_norm/naive": "regex:naive_layer_norm",
    "rms_norm/ours": "regex:rms_norm",
    "rms_norm/torch": None,
    "fused_add_rms_norm/ours": "regex:rms_norm",
    "fused_add_rms_norm/torch": None,
    "rms_norm_fp8/ours": "regex:rms_norm",
    "rms_norm_fp8/torch": None,
    "rms_norm_fp8_dynamic/ours": "regex:rms_norm",
    "rms_norm_fp8_dynamic/torch": None,
    "silu_and_mul/ours": "regex:silu",
    "silu_and_mul/torch": None,
    "silu_and_mul_fp8/ours": "regex:silu",
    "silu_and_mul_fp8/torch": None,
    "silu_mul/ours": "regex:silu",
    "silu_mul/torch": None,
    "skinny_gemm_fp8_m1/ours": "regex:skinny_gemm|fp8_rows",
    "skinny_gemm_fp8_m1/torch": None,
    "skinny_gemm_fp8_m32/ours": "regex:skinny_gemm|fp8_rows",
    "skinny_gemm_fp8_m32/torch": None,
    "q4k_gemv/ours": "regex:kquant",
    "q4k_gemv/torch": None,
    "q6k_gemv/ours": "regex:kquant",
    "q6k_gemv/torch": None,
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--op", choices=sorted(OPS))
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--list", action="store_true")
    args = p.parse_args(argv)
    if args.list or not args.op:
        print("\n".join(OPS))
        return 0
    fn = build(args.op)
    for _ in range(3):  # warm-up: JIT, allocator, first-launch costs stay outside the profile
        fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for _ in range(args.reps):
        fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
