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
# (rows, hidden) of every op: large enough to be HBM-bound (tens of MB), the roofline
# tutorials' LayerNorm shape.
N, D = 4096, 4096


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
    if impl == "ours":
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
    if family == "silu_and_mul":
        if impl == "ours":
            return lambda: k.silu_and_mul(gu)
        return lambda: F.silu(gu[:, :D]) * gu[:, D:]
    raise SystemExit(f"unknown op {op}")


# op -> Nsight Compute kernel-name filter (None: every kernel the op launches).
OPS = {
    "layer_norm/ours": "regex:layer_norm_kernel",
    "layer_norm/torch": None,
    "layer_norm/naive": "regex:naive_layer_norm",
    "rms_norm/ours": "regex:rms_norm_kernel",
    "rms_norm/torch": None,
    "fused_add_rms_norm/ours": "regex:rms_norm_kernel",
    "fused_add_rms_norm/torch": None,
    "rms_norm_fp8/ours": "regex:rms_norm_kernel",
    "rms_norm_fp8/torch": None,
    "silu_and_mul/ours": "regex:silu",
    "silu_and_mul/torch": None,
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
