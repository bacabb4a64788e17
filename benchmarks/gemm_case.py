"""One skinny_gemm_fp8 case launched a few times on rotated weights, for a profiler to read
(Nsight Compute: skip the first launches, which load the module and encode the device's
limits). No timing here; bench_skinny_gemm.py times.

    python3 benchmarks/gemm_case.py N K M [rb,kw,cluster,convert] [--launches 12]

The weight rotates over 8 copies, so a profiled launch reads its weight from HBM as in
the benchmark (unless the profiler flushes caches itself).
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

FP8 = torch.float8_e4m3fn


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("n", type=int)
    p.add_argument("k", type=int)
    p.add_argument("m", type=int)
    p.add_argument("config", nargs="?", default="", help="rb,kw,cluster,convert (empty: the launcher's)")
    p.add_argument("--launches", type=int, default=12)
    args = p.parse_args(argv)
    k = harness.load_kernel()
    cfg = [int(v) for v in args.config.split(",")] if args.config else []
    dev = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU build ignores config
    ws = [(torch.randn(args.n, args.k, device=dev) * 3).clamp(-448, 448).to(FP8) for _ in range(8)]
    a = (torch.randn(args.m, args.k, device=dev) * 3).clamp(-448, 448).to(FP8)
    sa = torch.tensor([0.01], device=dev)
    sb = torch.tensor([0.01], device=dev)
    out = torch.empty(args.m, args.n, device=dev, dtype=torch.bfloat16)
    for i in range(args.launches):
        k.ops.skinny_gemm_fp8(out, a, ws[i % len(ws)], sa, sb, None, cfg)
    if dev == "cuda":
        torch.cuda.synchronize()
    print(f"gemm_case: {args.launches} launches of {args.n} x {args.k}, M {args.m}, config {cfg or 'auto'} ({dev})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
