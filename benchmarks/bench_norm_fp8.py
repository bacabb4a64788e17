"""Fused residual add + RMSNorm + FP8 quantisation: ours vs eager and torch.compile.

The MI300 blog's shape (hidden 16384, fp16, rows 1..2048), static per-tensor scale
and dynamic per-row scales, both with the residual add. Same inputs for every
implementation, checked against fp64 first; times are medians of CUDA-graph
replays over rotating input copies (harness.time_us); `floor` = compulsory bytes
(x read, residual read and written, fp8 out written, weight read; plus the row
scales) at the measured copy bandwidth.

    python benchmarks/bench_norm_fp8.py            # on the GPU; --quick for 3 points
    python benchmarks/bench_norm_fp8.py --cpu-smoke
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

FP8, FP8_MAX = torch.float8_e4m3fn, 448.0
ROWS = [1, 8, 32, 128, 512, 1024, 2048]


def norm_eager(x, r, w, eps):
    s = x + r
    sf = s.float()
    return w * (sf * torch.rsqrt(sf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype), s


def static_eager(x, r, w, inv_scale, eps):
    y, s = norm_eager(x, r, w, eps)
    return (y.float() * inv_scale).clamp(-FP8_MAX, FP8_MAX).to(FP8), s


def dynamic_eager(x, r, w, eps):
    y, s = norm_eager(x, r, w, eps)
    scale = (y.float().abs().amax(-1, keepdim=True) / FP8_MAX).clamp_min(1 / (FP8_MAX * 512))
    return (y.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8), scale, s


def rel_err(q, scale, ref):
    deq = q.double() * scale.double()
    return ((deq - ref).norm() / ref.norm()).item()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hidden", type=int, default=16384)
    p.add_argument("--rows", type=int, nargs="+", default=ROWS)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--cpu-smoke", action="store_true")
    p.add_argument("--name", default="bench_norm_fp8")
    args = p.parse_args(argv)
    dev = harness.bench_device(args.cpu_smoke, "bench_norm_fp8")
    if dev is None:
        return 0
    if dev == "cpu":
        args.hidden, args.rows = 256, [1, 4]
    if args.quick:
        args.rows = [1, 128, 2048]
    k = harness.load_kernel()
    eps, d, dtype = 1e-6, args.hidden, torch.float16
    torch._dynamo.config.cache_size_limit = 64
    static_impls = {
        "ours": lambda x, r, w, sc, inv: (k.rms_norm_fp8(x, w, sc, eps, residual=r), r),
        "eager": lambda x, r, w, sc, inv: static_eager(x, r, w, inv, eps),
        "compile": torch.compile(lambda x, r, w, sc, inv: static_eager(x, r, w, inv, eps), dynamic=False),
    }
    dynamic_impls = {
        "ours": lambda x, r, w: (*k.rms_norm_fp8_dynamic(x, w, eps, residual=r), r),
        "eager": lambda x, r, w: dynamic_eager(x, r, w, eps),
        "compile": torch.compile(lambda x, r, w: dynamic_eager(x, r, w, eps), dynamic=False),
    }
    static_impls, dynamic_impls = harness.with_no_pdl(static_impls, dev), harness.with_no_pdl(dynamic_impls, dev)
    bw = harness.copy_bandwidth(device=dev)
    print(f"copy bandwidth (read+write): {bw / 1e9:.0f} GB/s")
    md = harness.out_dir() / f"{args.name}.md"
    md.write_text(f"# add + RMSNorm + FP8, hidden {d}, fp16\n\ncopy bandwidth {bw / 1e9:.0f} GB/s\n")
    results = []
    w = (1 + 0.1 * torch.randn(d, device=dev)).to(dtype)
    scale = torch.tensor([0.05], device=dev)
    inv = 1.0 / scale
    for mode, impls in (("static", static_impls), ("dynamic", dynamic_impls)):
        table = []
        for n in args.rows:
            x = torch.randn(n, d, device=dev, dtype=dtype)
            r = torch.randn(n, d, device=dev, dtype=dtype)
            s64 = x.double() + r.double()
            ref = w.double() * s64 * torch.rsqrt(s64.pow(2).mean(-1, keepdim=True) + eps)
            errs = {}
            for name, f in impls.items():
                res = f(x.clone(), r.clone(), w, scale, inv) if mode == "static" else f(x.clone(), r.clone(), w)
                q, sc = (res[0], scale) if mode == "static" else (res[0], res[1])
                errs[name] = rel_err(q, sc, ref)
            print(f"  {mode} {n}x{d} rel err vs fp64: " + harness.err_summary(errs, 0.07))
            es = x.element_size()
            nbytes = n * d * (3 * es + 1) + d * es + (4 * n if mode == "dynamic" else 0)
            n_rot = harness.rotations_for(2 * n * d * es)
            xs = [x.clone() for _ in range(n_rot)]
            rs = [r.clone() for _ in range(n_rot)]
            if mode == "static":
                call = lambda f, i, xs=xs, rs=rs: f(xs[i], rs[i], w, scale, inv)  # noqa: E731
            else:
                call = lambda f, i, xs=xs, rs=rs: f(xs[i], rs[i], w)  # noqa: E731
            table.append(harness.time_point(f"add_rms_norm_fp8_{mode}", impls, errs, call, n, d,
                                            dtype, nbytes, n_rot, bw, dev, results))
            del xs, rs
        harness.print_table(harness.table_headers(list(impls)), table,
                            f"add + RMSNorm + FP8 ({mode} scale), hidden={d}, fp16", md)
    print(f"wrote {md}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
